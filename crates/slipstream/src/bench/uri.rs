//! The parts of a `mongodb://` connection string the bench uses: the seed
//! hosts and whether they form a replica set (`replicaSet=`), or name one
//! node to talk to directly.

/// The most seed hosts a URI may list (a replica set has at most 50
/// members).
pub const HOSTS_MAX: usize = 50;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectionString {
    /// `host:port` of every seed, in the URI's order (port 27017 when
    /// omitted).
    pub hosts: Vec<String>,
    /// The set's name from `replicaSet=`: the primary is discovered through
    /// `hello` and every member must answer this `setName`.
    pub replica_set: Option<String>,
}

impl ConnectionString {
    /// True when the bench talks to the one seed as it is, whatever its
    /// role: one host and no `replicaSet=` (or `directConnection=true`).
    pub fn is_direct(&self) -> bool {
        self.replica_set.is_none() && self.hosts.len() == 1
    }
}

pub fn parse(uri: &str) -> Result<ConnectionString, String> {
    let rest = uri.strip_prefix("mongodb://").ok_or_else(|| format!("URI must start with mongodb://: {uri}"))?;
    let (authority, options) = match rest.find(['/', '?']) {
        Some(at) => (&rest[..at], rest[at..].trim_start_matches('/')),
        None => (rest, ""),
    };
    let host_list = authority.rsplit('@').next().unwrap_or_default();
    let hosts = host_list.split(',').map(host_and_port).collect::<Result<Vec<_>, _>>()?;
    if hosts.len() > HOSTS_MAX {
        return Err(format!("URI names {} hosts; at most {HOSTS_MAX}", hosts.len()));
    }
    let mut replica_set = None;
    let mut direct = false;
    let query = options.split_once('?').map(|(_, query)| query).unwrap_or(options.trim_start_matches('?'));
    for pair in query.split('&').filter(|pair| !pair.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        match key {
            "replicaSet" if !value.is_empty() => replica_set = Some(value.to_owned()),
            "replicaSet" => return Err(format!("replicaSet= needs a name: {uri}")),
            "directConnection" => direct = value == "true",
            _ => {}
        }
    }
    if direct && hosts.len() != 1 {
        return Err(format!("directConnection=true needs exactly one host: {uri}"));
    }
    if direct {
        replica_set = None;
    }
    Ok(ConnectionString { hosts, replica_set })
}

/// `host:port` of one URI host (`[v6]:port` kept bracketed, as sockets
/// accept it).
fn host_and_port(host: &str) -> Result<String, String> {
    if host.is_empty() {
        return Err("URI has an empty host".into());
    }
    let has_port = match host.rfind(']') {
        Some(bracket) => host[bracket..].contains(':'),
        None => host.contains(':'),
    };
    if !has_port {
        return Ok(format!("{host}:27017"));
    }
    let port = host.rsplit(':').next().unwrap_or_default();
    port.parse::<u16>().map_err(|_| format!("bad port in host {host}"))?;
    Ok(host.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_host_is_direct() {
        let uri = parse("mongodb://127.0.0.1:27018").unwrap();
        assert_eq!(uri.hosts, vec!["127.0.0.1:27018"]);
        assert!(uri.is_direct());
        let uri = parse("mongodb://localhost/?directConnection=true").unwrap();
        assert_eq!(uri.hosts, vec!["localhost:27017"]);
        assert!(uri.is_direct());
    }

    #[test]
    fn replica_set_uris_list_their_seeds() {
        let uri = parse("mongodb://127.0.0.1:1,127.0.0.1:2,h3/?replicaSet=rs0&w=majority").unwrap();
        assert_eq!(uri.hosts, vec!["127.0.0.1:1", "127.0.0.1:2", "h3:27017"]);
        assert_eq!(uri.replica_set.as_deref(), Some("rs0"));
        assert!(!uri.is_direct());
        let uri = parse("mongodb://u:p@a:1?replicaSet=rs1").unwrap();
        assert_eq!(uri.hosts, vec!["a:1"]);
        assert_eq!(uri.replica_set.as_deref(), Some("rs1"));
        assert!(!uri.is_direct(), "one seed of a named set still discovers the primary");
        let uri = parse("mongodb://[::1]:5,[::1]/db").unwrap();
        assert_eq!(uri.hosts, vec!["[::1]:5", "[::1]:27017"]);
    }

    #[test]
    fn bad_uris_are_refused() {
        assert!(parse("http://a").is_err());
        assert!(parse("mongodb://a:x").is_err());
        assert!(parse("mongodb://a,,b").is_err());
        assert!(parse("mongodb://a?replicaSet=").is_err());
        assert!(parse("mongodb://a,b/?directConnection=true").is_err());
        let many = (0..=HOSTS_MAX).map(|n| format!("h{n}")).collect::<Vec<_>>().join(",");
        assert!(parse(&format!("mongodb://{many}")).is_err());
    }
}
