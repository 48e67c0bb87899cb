//! `cluster partition "1,2|3"`: sides of member ids separated by `|`, and
//! which members each member must block (the `blockMembers` fail point).
//!
//! A member on one side blocks every member on every other side, in both
//! directions (each of them blocks the other). A member named on no side
//! blocks nobody and is blocked by nobody: it still talks to both sides, as
//! a bridge would (a partial partition). Client connections are never
//! affected.

/// Sides, each a list of member ids.
pub type Sides = Vec<Vec<u32>>;

/// Parses `"1,2|3"` and checks it against the known member ids.
pub fn parse_sides(spec: &str, known: &[u32]) -> Result<Sides, String> {
    let mut sides = Vec::new();
    for side in spec.split('|') {
        let mut ids = Vec::new();
        for item in side.split(',').map(str::trim).filter(|item| !item.is_empty()) {
            let id = item
                .parse::<u32>()
                .map_err(|_| format!("'{item}' in \"{spec}\" is not a member number"))?;
            ids.push(id);
        }
        sides.push(ids);
    }
    check_sides(&sides, known)?;
    Ok(sides)
}

/// At least two sides, none empty, each id known and named once.
pub fn check_sides(sides: &[Vec<u32>], known: &[u32]) -> Result<(), String> {
    if sides.len() < 2 {
        return Err("a partition needs at least two sides separated by '|', e.g. \"1,2|3\"".into());
    }
    if sides.iter().any(Vec::is_empty) {
        return Err("every side of a partition needs at least one member".into());
    }
    let mut seen = Vec::new();
    for &id in sides.iter().flatten() {
        if !known.contains(&id) {
            return Err(format!("no member {id} in this cluster"));
        }
        if seen.contains(&id) {
            return Err(format!("member {id} is on more than one side"));
        }
        seen.push(id);
    }
    Ok(())
}

/// The ids that member `id` must block under `sides`: every member of
/// every side but its own (nobody when it is on no side).
pub fn blocked_by(id: u32, sides: &[Vec<u32>]) -> Vec<u32> {
    let Some(own) = sides.iter().position(|side| side.contains(&id)) else {
        return Vec::new();
    };
    let mut blocked: Vec<u32> = sides
        .iter()
        .enumerate()
        .filter(|(index, _)| *index != own)
        .flat_map(|(_, side)| side.iter().copied())
        .collect();
    blocked.sort_unstable();
    blocked
}

/// `"1,2|3"` again, for messages.
pub fn format_sides(sides: &[Vec<u32>]) -> String {
    let sides: Vec<String> = sides
        .iter()
        .map(|side| side.iter().map(u32::to_string).collect::<Vec<_>>().join(","))
        .collect();
    sides.join("|")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_sides() {
        assert_eq!(parse_sides("1,2|3", &[1, 2, 3]).unwrap(), vec![vec![1, 2], vec![3]]);
        assert_eq!(
            parse_sides(" 1 | 2 | 3 ", &[1, 2, 3]).unwrap(),
            vec![vec![1], vec![2], vec![3]]
        );
        assert_eq!(format_sides(&parse_sides("3|1,2", &[1, 2, 3]).unwrap()), "3|1,2");
    }

    #[test]
    fn refuses_bad_sides() {
        let known = [1, 2, 3];
        assert!(parse_sides("1,2,3", &known).unwrap_err().contains("two sides"));
        assert!(parse_sides("1,2|", &known).unwrap_err().contains("at least one member"));
        assert!(parse_sides("1|2|1", &known).unwrap_err().contains("more than one side"));
        assert!(parse_sides("1|4", &known).unwrap_err().contains("no member 4"));
        assert!(parse_sides("1|x", &known).unwrap_err().contains("not a member number"));
        assert!(parse_sides("1|-2", &known).is_err());
    }

    #[test]
    fn each_side_blocks_the_others_and_a_bridge_blocks_nobody() {
        let sides = vec![vec![1, 2], vec![3], vec![5]];
        assert_eq!(blocked_by(1, &sides), vec![3, 5]);
        assert_eq!(blocked_by(3, &sides), vec![1, 2, 5]);
        assert_eq!(blocked_by(4, &sides), Vec::<u32>::new());
        // Blocking is symmetric: a blocks b exactly when b blocks a.
        for a in 1..=5 {
            for b in 1..=5 {
                assert_eq!(blocked_by(a, &sides).contains(&b), blocked_by(b, &sides).contains(&a));
            }
        }
    }
}
