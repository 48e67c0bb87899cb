//! Turning a filter document into a `Node` tree, with MongoDB's error
//! messages for what it rejects.

use bson::{Bson, Document};

use super::eval::ExprNode;
use super::predicate::{CompareOp, InList, RegexMatcher, TypeSet};
use super::{Node, Predicate};
use crate::compare::{as_number, Number};
use crate::error::{codes, QueryError};
use crate::expr::Expr;
use crate::path::FieldPath;

/// How deeply filters may nest (`$and` in `$or` in `$elemMatch` ...);
/// MongoDB's limit is 100 levels.
const FILTER_DEPTH_MAX: usize = 100;

/// How many components a filter's path may have: no stored document has
/// more levels (MongoDB's match parser refuses longer paths with
/// `maxDepthForUserStorage`).
const FILTER_PATH_PARTS_MAX: usize = crate::validate::STORED_DEPTH_MAX;

/// MongoDB's code for a filter path longer than `FILTER_PATH_PARTS_MAX`.
const FILTER_PATH_TOO_LONG: i32 = 5729100;

pub fn parse_document(filter: &Document, depth: usize) -> Result<Node, QueryError> {
    parse_document_in(filter, depth, true)
}

/// `allow_expr` is false inside `$elemMatch`: MongoDB only evaluates
/// `$expr` against the whole document.
fn parse_document_in(
    filter: &Document,
    depth: usize,
    allow_expr: bool,
) -> Result<Node, QueryError> {
    if depth > FILTER_DEPTH_MAX {
        return Err(QueryError::bad_value(format!(
            "exceeded maximum query tree depth of {FILTER_DEPTH_MAX}"
        )));
    }
    let mut children = Vec::new();
    for (key, value) in filter {
        if let Some(operator) = key.strip_prefix('$') {
            if operator == "expr" && !allow_expr {
                return Err(QueryError::new(
                    codes::QUERY_FEATURE_NOT_ALLOWED,
                    "$expr can only be applied to the top-level document",
                ));
            }
            if let Some(node) = parse_top_level_operator(operator, value, depth, allow_expr)? {
                children.push(node);
            }
        } else {
            children.push(parse_path(key, value, depth)?);
        }
    }
    Ok(and_of(children))
}

fn and_of(mut children: Vec<Node>) -> Node {
    match children.len() {
        0 => Node::True,
        1 => children.pop().unwrap_or(Node::True),
        _ => Node::And(children),
    }
}

/// Returns `None` for operators that do not filter (`$comment`).
fn parse_top_level_operator(
    operator: &str,
    value: &Bson,
    depth: usize,
    allow_expr: bool,
) -> Result<Option<Node>, QueryError> {
    let node = match operator {
        "and" => and_of(parse_clauses(operator, value, depth, allow_expr)?),
        "or" => Node::Or(parse_clauses(operator, value, depth, allow_expr)?),
        "nor" => Node::Nor(parse_clauses(operator, value, depth, allow_expr)?),
        "comment" => return Ok(None),
        "expr" => Node::Expr(ExprNode {
            expr: Expr::parse(value)?,
            collation: None,
        }),
        "alwaysTrue" | "alwaysFalse" => {
            if !matches!(as_number(value), Some(Number::Int(1))) && value != &Bson::Double(1.0) {
                return Err(QueryError::failed_to_parse(format!(
                    "${operator} must be an integer value of 1"
                )));
            }
            if operator == "alwaysTrue" {
                Node::True
            } else {
                Node::False
            }
        }
        // MongoDB 7.0 with JavaScript disabled (Slipstream has no
        // JavaScript engine) refuses `$where` once its argument is code.
        "where" => {
            if !matches!(value, Bson::String(_) | Bson::JavaScriptCode(_) | Bson::JavaScriptCodeWithScope(_)) {
                return Err(QueryError::bad_value("$where got bad type"));
            }
            return Err(QueryError::new(6108304, "no globalScriptEngine in $where parsing"));
        }
        "sampleRate" => sample_rate(value)?,
        "jsonSchema" => {
            let Bson::Document(schema) = value else {
                return Err(QueryError::new(codes::TYPE_MISMATCH, "$jsonSchema must be an object"));
            };
            Node::Schema(std::sync::Arc::new(crate::json_schema::JsonSchema::parse(schema)?))
        }
        "text" => {
            return Err(QueryError::new(
                codes::COMMAND_NOT_SUPPORTED,
                format!("${operator} is not supported by Slipstream"),
            ))
        }
        _ => {
            return Err(QueryError::bad_value(format!(
                "unknown top level operator: ${operator}"
            )))
        }
    };
    Ok(Some(node))
}

/// `$sampleRate: x`: each document matches with probability x, which
/// MongoDB rewrites to `{$expr: {$lt: [{$rand: {}}, x]}}` (0 and 1 to
/// never and always).
fn sample_rate(value: &Bson) -> Result<Node, QueryError> {
    let rate = match as_number(value) {
        Some(Number::Int(n)) => n as f64,
        Some(Number::Float(x)) => x,
        None => return Err(QueryError::bad_value("argument to $sampleRate must be a numeric type")),
    };
    if !(0.0..=1.0).contains(&rate) {
        return Err(QueryError::bad_value("numeric argument to $sampleRate must be in [0, 1]"));
    }
    Ok(match rate {
        0.0 => Node::False,
        1.0 => Node::True,
        _ => Node::Expr(ExprNode { expr: Expr::parse(&bson::bson!({"$lt": [{"$rand": {}}, rate]}))?, collation: None }),
    })
}

fn parse_clauses(
    operator: &str,
    value: &Bson,
    depth: usize,
    allow_expr: bool,
) -> Result<Vec<Node>, QueryError> {
    let items = match value {
        Bson::Array(items) if !items.is_empty() => items,
        _ => {
            return Err(QueryError::bad_value(format!(
                "${operator} must be a nonempty array"
            )))
        }
    };
    items
        .iter()
        .map(|item| match item {
            Bson::Document(clause) => parse_document_in(clause, depth + 1, allow_expr),
            _ => Err(QueryError::bad_value(
                "$or/$and/$nor entries need to be full objects",
            )),
        })
        .collect()
}

/// Whether an object in a filter is a set of operators (`{$gt: 5}`) rather
/// than a document to compare with. MongoDB looks at the first field only;
/// DBRef fields (`$ref`, `$id`, `$db`) are data.
fn is_operator_document(value: &Document) -> bool {
    match value.keys().next() {
        Some(first) => first.starts_with('$') && !matches!(first.as_str(), "$ref" | "$id" | "$db"),
        None => false,
    }
}

fn parse_path(key: &str, value: &Bson, depth: usize) -> Result<Node, QueryError> {
    if crate::depth::path_parts(key) > FILTER_PATH_PARTS_MAX {
        return Err(QueryError::new(FILTER_PATH_TOO_LONG, "FieldPath is too long"));
    }
    let path = FieldPath::new(key);
    match value {
        Bson::Document(operators) if is_operator_document(operators) => {
            parse_operators(&path, operators, depth)
        }
        Bson::RegularExpression(regex) => Ok(field(
            &path,
            Predicate::Regex(RegexMatcher::new(
                regex.pattern.as_str(),
                regex.options.as_str(),
            )?),
        )),
        other => Ok(field(&path, Predicate::Eq(other.clone()))),
    }
}

fn field(path: &FieldPath, predicate: Predicate) -> Node {
    Node::Field {
        path: path.clone(),
        predicate,
    }
}

fn not(node: Node) -> Node {
    Node::Nor(vec![node])
}

/// `{$gt: 1, $lt: 5}` on one path: each operator is its own condition over
/// the path's candidates, all of which must hold.
pub fn parse_operators(
    path: &FieldPath,
    operators: &Document,
    depth: usize,
) -> Result<Node, QueryError> {
    if depth > FILTER_DEPTH_MAX {
        return Err(QueryError::bad_value(format!(
            "exceeded maximum query tree depth of {FILTER_DEPTH_MAX}"
        )));
    }
    let mut children = Vec::new();
    let regex_options = operators.get("$options");
    for (name, argument) in operators {
        match name.as_str() {
            "$options" => {
                if !operators.contains_key("$regex") {
                    return Err(QueryError::bad_value("$options needs a $regex"));
                }
            }
            "$regex" => children.push(field(
                path,
                Predicate::Regex(parse_regex(argument, regex_options)?),
            )),
            _ => children.push(parse_operator(path, name, argument, depth)?),
        }
    }
    Ok(and_of(children))
}

fn parse_regex(pattern: &Bson, options: Option<&Bson>) -> Result<RegexMatcher, QueryError> {
    let options = match options {
        None => None,
        Some(Bson::String(o)) => Some(o.as_str()),
        Some(_) => return Err(QueryError::bad_value("$options has to be a string")),
    };
    match pattern {
        Bson::String(p) => RegexMatcher::new(p, options.unwrap_or("")),
        Bson::RegularExpression(r) => {
            if options.is_some() && !r.options.is_empty() {
                return Err(QueryError::bad_value(
                    "options set in both $regex and $options",
                ));
            }
            RegexMatcher::new(r.pattern.as_str(), options.unwrap_or(r.options.as_str()))
        }
        _ => Err(QueryError::bad_value("$regex has to be a string")),
    }
}

fn parse_operator(
    path: &FieldPath,
    name: &str,
    argument: &Bson,
    depth: usize,
) -> Result<Node, QueryError> {
    let compare = |op| Ok(field(path, Predicate::Compare(op, argument.clone())));
    match name {
        "$eq" => Ok(field(path, Predicate::Eq(argument.clone()))),
        "$ne" => {
            if matches!(argument, Bson::RegularExpression(_)) {
                return Err(QueryError::bad_value("Can't have regex as arg to $ne."));
            }
            Ok(not(field(path, Predicate::Eq(argument.clone()))))
        }
        "$gt" => compare(CompareOp::Gt),
        "$gte" => compare(CompareOp::Gte),
        "$lt" => compare(CompareOp::Lt),
        "$lte" => compare(CompareOp::Lte),
        "$in" => Ok(in_node(path, parse_in_list("$in", argument)?)),
        "$nin" => Ok(not(in_node(path, parse_in_list("$nin", argument)?))),
        "$exists" => {
            let exists = field(path, Predicate::Exists);
            Ok(if exists_flag(argument) {
                exists
            } else {
                not(exists)
            })
        }
        "$type" => Ok(field(path, Predicate::Type(TypeSet::parse(argument)?))),
        "$mod" => parse_mod(path, argument),
        "$size" => Ok(field(path, Predicate::Size(parse_size(argument)?))),
        "$all" => parse_all(path, argument, depth),
        "$elemMatch" => Ok(field(path, parse_elem_match(argument, depth)?)),
        "$not" => parse_not(path, argument, depth),
        "$bitsAllSet" | "$bitsAllClear" | "$bitsAnySet" | "$bitsAnyClear" => {
            let test = super::BitTest::from_operator(name).expect("a bit test operator");
            Ok(field(path, Predicate::Bits(super::BitsPredicate::parse(name, test, argument)?)))
        }
        "$near" | "$nearSphere" | "$geoWithin" | "$geoIntersects" | "$within" | "$text" | "$where" => {
            Err(QueryError::new(
                codes::COMMAND_NOT_SUPPORTED,
                format!("{name} is not supported by Slipstream"),
            ))
        }
        _ => Err(QueryError::bad_value(format!("unknown operator: {name}"))),
    }
}

fn in_node(path: &FieldPath, list: InList) -> Node {
    if list.values.is_empty() && list.regexes.is_empty() {
        return Node::False;
    }
    field(path, Predicate::In(list))
}

fn parse_in_list(operator: &str, argument: &Bson) -> Result<InList, QueryError> {
    let items = match argument {
        Bson::Array(items) => items,
        _ => return Err(QueryError::bad_value(format!("{operator} needs an array"))),
    };
    let mut list = InList::default();
    for item in items {
        match item {
            Bson::RegularExpression(r) => list
                .regexes
                .push(RegexMatcher::new(r.pattern.as_str(), r.options.as_str())?),
            Bson::Document(d) if is_operator_document(d) => {
                return Err(QueryError::bad_value("cannot nest $ under $in"))
            }
            other => list.values.push(other.clone()),
        }
    }
    Ok(list)
}

/// `$exists` takes any value; false, 0 and null mean "does not exist".
fn exists_flag(argument: &Bson) -> bool {
    match argument {
        Bson::Boolean(b) => *b,
        Bson::Null | Bson::Undefined => false,
        other => match as_number(other) {
            Some(Number::Int(n)) => n != 0,
            Some(Number::Float(f)) => f != 0.0,
            None => true,
        },
    }
}

fn parse_mod(path: &FieldPath, argument: &Bson) -> Result<Node, QueryError> {
    let items = match argument {
        Bson::Array(items) => items,
        _ => return Err(QueryError::bad_value("malformed mod, needs to be an array")),
    };
    if items.len() < 2 {
        return Err(QueryError::bad_value("malformed mod, not enough elements"));
    }
    if items.len() > 2 {
        return Err(QueryError::bad_value("malformed mod, too many elements"));
    }
    let divisor = mod_argument(&items[0], "divisor")?;
    let remainder = mod_argument(&items[1], "remainder")?;
    if divisor == 0 {
        return Err(QueryError::bad_value("divisor cannot be 0"));
    }
    Ok(field(path, Predicate::Mod { divisor, remainder }))
}

fn mod_argument(value: &Bson, what: &str) -> Result<i64, QueryError> {
    match as_number(value) {
        Some(Number::Int(n)) => Ok(n),
        Some(Number::Float(f)) if f.is_finite() => Ok(f.trunc() as i64),
        Some(Number::Float(_)) => Err(QueryError::bad_value(format!("malformed mod, {what} value is invalid :: caused by :: Unable to coerce NaN/Inf to integral type"))),
        None => Err(QueryError::bad_value(format!("malformed mod, {what} not a number"))),
    }
}

fn parse_size(argument: &Bson) -> Result<usize, QueryError> {
    let size = match as_number(argument) {
        Some(Number::Int(n)) => n as f64,
        Some(Number::Float(f)) => f,
        None => return Err(QueryError::bad_value("$size needs a number")),
    };
    if size.fract() != 0.0 || size.is_nan() {
        return Err(QueryError::bad_value(format!(
            "$size must be a whole number, not {size}"
        )));
    }
    if size < 0.0 {
        return Err(QueryError::bad_value(format!(
            "$size may not be negative: {size}"
        )));
    }
    Ok(size as usize)
}

fn parse_elem_match(argument: &Bson, depth: usize) -> Result<Predicate, QueryError> {
    let spec = match argument {
        Bson::Document(spec) => spec,
        _ => return Err(QueryError::bad_value("$elemMatch needs an Object")),
    };
    let value_form = match spec.keys().next() {
        Some(first) => {
            first.starts_with('$')
                && !matches!(
                    first.as_str(),
                    "$and"
                        | "$or"
                        | "$nor"
                        | "$expr"
                        | "$where"
                        | "$comment"
                        | "$alwaysTrue"
                        | "$alwaysFalse"
                )
        }
        None => false,
    };
    if value_form {
        let conditions = parse_operators(&FieldPath::element(), spec, depth + 1)?;
        Ok(Predicate::ElemMatchValue(Box::new(conditions)))
    } else {
        Ok(Predicate::ElemMatchDocument(Box::new(parse_document_in(
            spec,
            depth + 1,
            false,
        )?)))
    }
}

fn parse_all(path: &FieldPath, argument: &Bson, depth: usize) -> Result<Node, QueryError> {
    let items = match argument {
        Bson::Array(items) => items,
        _ => return Err(QueryError::bad_value("$all needs an array")),
    };
    if items.is_empty() {
        return Ok(Node::False);
    }
    let elem_match_count = items
        .iter()
        .filter(|item| matches!(item, Bson::Document(d) if d.keys().next().map(String::as_str) == Some("$elemMatch")))
        .count();
    if elem_match_count > 0 && elem_match_count != items.len() {
        return Err(QueryError::bad_value(
            "$all/$elemMatch has to be consistent",
        ));
    }
    let mut children = Vec::new();
    for item in items {
        let node = match item {
            Bson::Document(d) if elem_match_count > 0 => {
                if d.len() != 1 {
                    return Err(QueryError::bad_value(
                        "$all/$elemMatch has to be consistent",
                    ));
                }
                field(
                    path,
                    parse_elem_match(d.get("$elemMatch").unwrap_or(&Bson::Null), depth)?,
                )
            }
            Bson::Document(d) if is_operator_document(d) => {
                return Err(QueryError::bad_value("no $ expressions in $all"))
            }
            Bson::RegularExpression(r) => field(
                path,
                Predicate::Regex(RegexMatcher::new(r.pattern.as_str(), r.options.as_str())?),
            ),
            other => field(path, Predicate::Eq(other.clone())),
        };
        children.push(node);
    }
    Ok(and_of(children))
}

fn parse_not(path: &FieldPath, argument: &Bson, depth: usize) -> Result<Node, QueryError> {
    match argument {
        Bson::RegularExpression(r) => Ok(not(field(
            path,
            Predicate::Regex(RegexMatcher::new(r.pattern.as_str(), r.options.as_str())?),
        ))),
        Bson::Document(operators) => {
            if operators.is_empty() {
                return Err(QueryError::bad_value("$not cannot be empty"));
            }
            if let Some(first) = operators.keys().find(|k| !k.starts_with('$')) {
                return Err(QueryError::bad_value(format!("unknown operator: {first}")));
            }
            Ok(not(parse_operators(path, operators, depth + 1)?))
        }
        _ => Err(QueryError::bad_value("$not needs a regex or a document")),
    }
}
