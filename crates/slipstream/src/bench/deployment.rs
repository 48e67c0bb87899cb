//! The node or set the bench drives: which member is the primary now, and
//! which are secondaries, found through `hello` as drivers do (follow the
//! `hosts` every member lists; the member answering `isWritablePrimary` is
//! the primary). Clients that see a "not primary" answer or lose their
//! connection ask for a rediscovery; one runs at a time and the others take
//! its result.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use bson::{doc, Bson, Document};

use super::client::Client;
use super::uri::{ConnectionString, HOSTS_MAX};

/// Longest one `hello` (connect included) may take before that member
/// counts as unreachable for this pass.
pub const HELLO_TIMEOUT: Duration = Duration::from_millis(1000);
/// Pause between two discovery passes that found no primary (an election
/// in progress).
const DISCOVERY_RETRY: Duration = Duration::from_millis(20);

/// What the last discovery found. `generation` grows with every discovery,
/// so that a client can tell whether the view it acted on is still the
/// newest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct View {
    pub primary: String,
    /// Members in state SECONDARY, in the order they were found.
    pub secondaries: Vec<String>,
    pub generation: u64,
}

pub struct Deployment {
    uri: ConnectionString,
    /// The newest view; written only by a discovery, under `discovering`.
    view: Mutex<Option<View>>,
    /// Held for the whole of a discovery: one pass at a time.
    discovering: tokio::sync::Mutex<()>,
}

/// Why a discovery pass found no primary.
enum PassError {
    /// Maybe an election in progress: try again.
    NoPrimary(String),
    /// Every member that answered belongs elsewhere.
    Misconfigured(String),
}

/// Why one member's `hello` cannot be used.
enum MemberError {
    /// Down, failing, or not configured yet.
    Unusable(String),
    /// A standalone or another set's member.
    Foreign(String),
}

/// What one member said about itself and the set.
struct MemberReply {
    me: String,
    writable_primary: bool,
    secondary: bool,
    /// `primary`, `hosts` and `passives`: the members it knows of.
    known: Vec<String>,
}

impl Deployment {
    pub fn new(uri: ConnectionString) -> Deployment {
        Deployment { uri, view: Mutex::new(None), discovering: tokio::sync::Mutex::new(()) }
    }

    pub fn is_direct(&self) -> bool {
        self.uri.is_direct()
    }

    /// The current view, discovering one if there is none yet.
    pub async fn view(&self, deadline: Instant) -> Result<View, String> {
        if let Some(view) = self.view.lock().unwrap().clone() {
            return Ok(view);
        }
        self.rediscover(0, deadline).await
    }

    /// A fresh view, whatever the current one says.
    pub async fn refresh(&self, deadline: Instant) -> Result<View, String> {
        let current = self.view.lock().unwrap().as_ref().map_or(0, |view| view.generation);
        self.rediscover(current, deadline).await
    }

    /// A fresh view, unless another client already replaced the view of
    /// generation `stale` while this one waited.
    pub async fn rediscover(&self, stale: u64, deadline: Instant) -> Result<View, String> {
        let _pass = self.discovering.lock().await;
        if let Some(view) = self.view.lock().unwrap().clone() {
            if view.generation != stale {
                return Ok(view);
            }
        }
        let found = self.discover(deadline).await?;
        let mut current = self.view.lock().unwrap();
        let generation = current.as_ref().map_or(0, |view| view.generation) + 1;
        let view = View { primary: found.0, secondaries: found.1, generation };
        *current = Some(view.clone());
        Ok(view)
    }

    /// Passes over the members until one answers as the writable primary.
    async fn discover(&self, deadline: Instant) -> Result<(String, Vec<String>), String> {
        if self.uri.is_direct() {
            return Ok((self.uri.hosts[0].clone(), Vec::new()));
        }
        loop {
            let last_error = match self.discovery_pass().await {
                Ok(found) => return Ok(found),
                Err(PassError::Misconfigured(err)) => return Err(err),
                Err(PassError::NoPrimary(err)) => err,
            };
            if Instant::now() + DISCOVERY_RETRY >= deadline {
                return Err(format!("no primary found among {:?}: {last_error}", self.uri.hosts));
            }
            tokio::time::sleep(DISCOVERY_RETRY).await;
        }
    }

    /// One pass: asks every seed and every member they name, once each.
    async fn discovery_pass(&self) -> Result<(String, Vec<String>), PassError> {
        let mut queue: VecDeque<String> = self.uri.hosts.iter().cloned().collect();
        let mut asked: Vec<String> = Vec::new();
        let mut primary = None;
        let mut secondaries = Vec::new();
        let mut last_error = String::from("no member answered");
        let mut in_set = 0;
        let mut foreign = None;
        while let Some(host) = queue.pop_front() {
            if asked.contains(&host) || asked.len() >= HOSTS_MAX {
                continue;
            }
            asked.push(host.clone());
            let reply = match hello(&host).await {
                Ok(reply) => reply,
                Err(err) => {
                    last_error = err;
                    continue;
                }
            };
            let member = match self.member_reply(&host, &reply) {
                Ok(member) => member,
                Err(MemberError::Unusable(err)) => {
                    last_error = err;
                    continue;
                }
                Err(MemberError::Foreign(err)) => {
                    foreign = Some(err);
                    continue;
                }
            };
            in_set += 1;
            for other in member.known {
                if !asked.contains(&other) && !queue.contains(&other) {
                    queue.push_back(other);
                }
            }
            if member.writable_primary && primary.is_none() {
                primary = Some(member.me);
            } else if member.secondary && !secondaries.contains(&member.me) {
                secondaries.push(member.me);
            }
        }
        match (primary, foreign) {
            (Some(primary), _) => Ok((primary, secondaries)),
            // Waiting would not help: the seeds name another set.
            (None, Some(foreign)) if in_set == 0 => Err(PassError::Misconfigured(foreign)),
            (None, _) => Err(PassError::NoPrimary(last_error)),
        }
    }

    fn member_reply(&self, host: &str, reply: &Document) -> Result<MemberReply, MemberError> {
        if !matches!(reply.get("ok"), Some(Bson::Double(ok)) if *ok == 1.0) {
            return Err(MemberError::Unusable(format!("hello to {host} failed: {reply}")));
        }
        let set_name = reply.get_str("setName").ok();
        let writable = reply.get_bool("isWritablePrimary").unwrap_or(false);
        if let Some(wanted) = &self.uri.replica_set {
            // A member without a config yet (no setName, not writable) may
            // join the set soon; a standalone or another set's member will
            // not.
            let foreign = set_name.is_some_and(|name| name != wanted) || (set_name.is_none() && writable);
            if foreign {
                let what = match set_name {
                    Some(name) => format!("it is a member of {name}"),
                    None => "it is a standalone".to_string(),
                };
                return Err(MemberError::Foreign(format!(
                    "{host} is not a member of replica set {wanted}: {what}"
                )));
            }
            if set_name.is_none() {
                return Err(MemberError::Unusable(format!("{host} has no replica set config yet")));
            }
        }
        let mut known = Vec::new();
        if let Ok(primary) = reply.get_str("primary") {
            known.push(primary.to_owned());
        }
        for key in ["hosts", "passives"] {
            if let Ok(list) = reply.get_array(key) {
                known.extend(list.iter().filter_map(|host| host.as_str().map(str::to_owned)));
            }
        }
        Ok(MemberReply {
            // The set's own name for the member, so that every view names a
            // member the same way whichever seed led to it.
            me: reply.get_str("me").unwrap_or(host).to_owned(),
            writable_primary: writable,
            secondary: reply.get_bool("secondary").unwrap_or(false),
            known,
        })
    }
}

/// One `hello` on a fresh connection, bounded by `HELLO_TIMEOUT`.
pub async fn hello(host: &str) -> Result<Document, String> {
    let exchange = async {
        let mut client = Client::connect(host).await?;
        client.command(&doc! {"hello": 1, "$db": "admin"}, &[]).await
    };
    match tokio::time::timeout(HELLO_TIMEOUT, exchange).await {
        Ok(Ok(reply)) => Ok(reply),
        Ok(Err(err)) => Err(format!("hello to {host}: {err}")),
        Err(_) => Err(format!("hello to {host}: no answer within {HELLO_TIMEOUT:?}")),
    }
}

#[cfg(test)]
mod tests {
    //! Discovery against fake members: tiny servers that answer every
    //! command with the `hello` reply the test sets (the real set is tested
    //! through the binary).

    use std::sync::Arc;

    use slipstream_wire::{check_frame, encode_op_msg, parse_message, Message};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use super::*;
    use crate::bench::uri;

    /// A fake member: its address and the reply it gives now.
    struct FakeMember {
        host: String,
        reply: Arc<Mutex<Document>>,
    }

    async fn fake_member() -> FakeMember {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let host = listener.local_addr().unwrap().to_string();
        let reply = Arc::new(Mutex::new(doc! {"ok": 1.0}));
        let shared = reply.clone();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let reply = shared.clone();
                tokio::spawn(async move {
                    let mut buffer = Vec::new();
                    loop {
                        let length = match check_frame(&buffer) {
                            Ok(length) => length,
                            Err(_) => {
                                if stream.read_buf(&mut buffer).await.unwrap_or(0) == 0 {
                                    return;
                                }
                                continue;
                            }
                        };
                        let Ok(Message::Msg(request)) = parse_message(&buffer[..length]) else {
                            return;
                        };
                        buffer.drain(..length);
                        let body = reply.lock().unwrap().clone();
                        let bytes = encode_op_msg(1, request.header.request_id, 0, &body, &[]).unwrap();
                        if stream.write_all(&bytes).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        FakeMember { host, reply }
    }

    fn member_reply(me: &str, set: &str, primary: bool, hosts: &[&str], primary_host: Option<&str>) -> Document {
        let mut reply = doc! {
            "ok": 1.0, "isWritablePrimary": primary, "secondary": !primary, "setName": set, "me": me, "hosts": hosts,
        };
        if let Some(primary_host) = primary_host {
            reply.insert("primary", primary_host);
        }
        reply
    }

    fn soon() -> Instant {
        Instant::now() + Duration::from_secs(5)
    }

    #[tokio::test]
    async fn a_seed_that_is_a_secondary_leads_to_the_primary() {
        let (a, c) = (fake_member().await, fake_member().await);
        // A member that is down: a port nobody listens on.
        let b = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().to_string();
        let hosts = [a.host.as_str(), b.as_str(), c.host.as_str()];
        *a.reply.lock().unwrap() = member_reply(&a.host, "rs0", false, &hosts, Some(&c.host));
        *c.reply.lock().unwrap() = member_reply(&c.host, "rs0", true, &hosts, Some(&c.host));
        let deployment = Deployment::new(uri::parse(&format!("mongodb://{}/?replicaSet=rs0", a.host)).unwrap());
        let view = deployment.view(soon()).await.unwrap();
        assert_eq!(view.primary, c.host);
        assert_eq!(view.secondaries, vec![a.host.clone()]);
        assert_eq!(view.generation, 1);
    }

    #[tokio::test]
    async fn members_of_another_set_are_ignored() {
        let (a, other) = (fake_member().await, fake_member().await);
        *other.reply.lock().unwrap() = member_reply(&other.host, "rs9", true, &[&other.host], None);
        *a.reply.lock().unwrap() = member_reply(&a.host, "rs0", false, &[&a.host], None);
        let uri = format!("mongodb://{},{}/?replicaSet=rs0", other.host, a.host);
        let deployment = Deployment::new(uri::parse(&uri).unwrap());
        let err = deployment.view(Instant::now() + Duration::from_millis(200)).await.unwrap_err();
        assert!(err.contains("no primary found"), "{err}");
        // Only the other set answers: no waiting.
        let deployment = Deployment::new(uri::parse(&format!("mongodb://{}/?replicaSet=rs0", other.host)).unwrap());
        let started = Instant::now();
        let err = deployment.view(soon()).await.unwrap_err();
        assert!(err.contains("not a member of replica set rs0"), "{err}");
        assert!(started.elapsed() < Duration::from_secs(1));
        assert!(deployment.view.lock().unwrap().is_none(), "a failed discovery leaves no view");
    }

    #[tokio::test]
    async fn rediscovery_waits_out_an_election_and_is_shared() {
        let (a, b) = (fake_member().await, fake_member().await);
        let hosts = [a.host.as_str(), b.host.as_str()];
        *a.reply.lock().unwrap() = member_reply(&a.host, "rs0", true, &hosts, Some(&a.host));
        *b.reply.lock().unwrap() = member_reply(&b.host, "rs0", false, &hosts, Some(&a.host));
        let uri = format!("mongodb://{},{}/?replicaSet=rs0", a.host, b.host);
        let deployment = Arc::new(Deployment::new(uri::parse(&uri).unwrap()));
        let first = deployment.view(soon()).await.unwrap();
        assert_eq!(first.primary, a.host);
        // The primary steps down; nobody is primary for 200 ms, then b is.
        *a.reply.lock().unwrap() = member_reply(&a.host, "rs0", false, &hosts, None);
        *b.reply.lock().unwrap() = member_reply(&b.host, "rs0", false, &hosts, None);
        let elect = {
            let (b_reply, b_host, a_host) = (b.reply.clone(), b.host.clone(), a.host.clone());
            async move {
                tokio::time::sleep(Duration::from_millis(200)).await;
                let hosts = [a_host.as_str(), b_host.as_str()];
                *b_reply.lock().unwrap() = member_reply(&b_host, "rs0", true, &hosts, Some(&b_host));
            }
        };
        let started = Instant::now();
        let clients: Vec<_> = (0..4)
            .map(|_| {
                let deployment = deployment.clone();
                tokio::spawn(async move { deployment.rediscover(first.generation, soon()).await.unwrap() })
            })
            .collect();
        elect.await;
        for client in clients {
            let view = client.await.unwrap();
            assert_eq!(view.primary, b.host);
            assert_eq!(view.generation, 2, "four clients, one rediscovery");
        }
        assert!(started.elapsed() >= Duration::from_millis(200));
        assert_eq!(deployment.refresh(soon()).await.unwrap().generation, 3);
    }

    #[tokio::test]
    async fn a_direct_node_is_its_own_primary() {
        let deployment = Deployment::new(uri::parse("mongodb://127.0.0.1:1").unwrap());
        let view = deployment.view(soon()).await.unwrap();
        assert_eq!(view.primary, "127.0.0.1:1");
        assert!(view.secondaries.is_empty());
    }
}
