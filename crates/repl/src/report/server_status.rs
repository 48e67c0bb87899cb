//! `serverStatus.repl`: MongoDB's `ReplicationInfoServerStatus` section is
//! the member's `hello` response (non-legacy field names) followed by the
//! rollback id, so a monitor sees the same topology a driver does.

use bson::Document;

use super::hello::hello_fields;
use super::snapshot::ReplSnapshot;

/// The `repl` section of `serverStatus` on a replica set member.
pub fn server_status_repl(snapshot: &ReplSnapshot) -> Document {
    let mut section = hello_fields(snapshot, false);
    section.insert("rbid", snapshot.extras.rbid);
    section
}

#[cfg(test)]
mod tests {
    use super::super::hello::election_id;
    use super::super::snapshot::tests::{extras, node, three_members};
    use super::*;
    use bson::Bson;
    use slipstream_consensus::MemberState;

    #[test]
    fn repl_section_is_hello_plus_rbid() {
        let mut snapshot = ReplSnapshot::capture(&node(three_members(), 0), extras("a:27017"));
        let set = snapshot.set.as_mut().expect("configured");
        set.state = MemberState::Primary;
        set.writable_primary = true;
        set.primary = Some(0);
        set.term = 5;
        let section = server_status_repl(&snapshot);
        assert_eq!(section.get_str("setName").ok(), Some("rs1"));
        assert_eq!(section.get("setVersion"), Some(&Bson::Int32(1)));
        assert_eq!(section.get("isWritablePrimary"), Some(&Bson::Boolean(true)));
        assert_eq!(section.get("secondary"), Some(&Bson::Boolean(false)));
        assert_eq!(section.get_str("primary").ok(), Some("a:27017"));
        assert_eq!(section.get_str("me").ok(), Some("a:27017"));
        assert_eq!(section.get("electionId"), Some(&Bson::ObjectId(election_id(5))));
        assert_eq!(section.get_array("hosts").map(|h| h.len()).ok(), Some(3));
        assert!(section.get_document("lastWrite").is_ok());
        assert!(section.get_document("topologyVersion").is_ok());
        assert_eq!(section.get("rbid"), Some(&Bson::Int32(7)));
        assert!(section.get("ismaster").is_none());
    }

    #[test]
    fn uninitialized_member_reports_no_config_and_its_rbid() {
        let section = server_status_repl(&ReplSnapshot::uninitialized(extras("a:1")));
        assert_eq!(section.get("isreplicaset"), Some(&Bson::Boolean(true)));
        assert!(section.get("setName").is_none());
        assert_eq!(section.get("rbid"), Some(&Bson::Int32(7)));
    }
}
