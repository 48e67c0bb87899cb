//! Aggregation expressions: parsing a BSON expression once into an `Expr`
//! tree, then evaluating it against documents.
//!
//! A value in an expression may be *missing* (a field that does not
//! exist). Internally every evaluation returns `Value = Option<Bson>`,
//! `None` standing for missing, because MongoDB treats missing differently
//! from null: `$project` drops a missing computed field, `$type` answers
//! "missing", and comparisons order missing below null (so `{$eq:
//! ["$absent", null]}` is false, as in MongoDB).
//!
//! Operators live in submodules by family; each exports a table of
//! `OpSpec`s that `parse` consults. No operator touches a clock: `$$NOW`
//! comes from the caller through `Variables`.

mod accumulators;
mod arithmetic;
mod array_ordering;
mod arrays;
mod conditional;
mod date_math;
mod date_parts;
mod dates;
mod javascript;
mod objects;
mod quantiles;
pub(crate) mod random;
mod sets;
mod strings;
mod trigonometry;
mod types;

use std::cmp::Ordering;

use bson::{Bson, Document};

use crate::collation::{compare_with, Collation, CollationRef};
use crate::error::{codes, QueryError};

pub(crate) use objects::merge_into as merge_objects_into;

/// The result of evaluating an expression: `None` is a missing value.
pub type Value = Option<Bson>;

/// A parsed aggregation expression.
#[derive(Clone, Debug)]
pub struct Expr {
    node: Node,
}

#[derive(Clone, Debug)]
enum Node {
    Literal(Bson),
    /// `$a.b.c`: a path from `$$CURRENT`.
    Field(Vec<String>),
    /// `$$name.a.b`.
    Variable { name: String, path: Vec<String> },
    /// `{a: <expr>, b: <expr>}`: a document built from expressions.
    Object(Vec<(String, Expr)>),
    /// `[<expr>, ...]`.
    Array(Vec<Expr>),
    Operator { spec: &'static OpSpec, args: Args },
}

/// The arguments of one operator. Positional operators fill `exprs` in
/// order; named-argument operators fill it in the order of the spec's
/// `required` then `optional` names (absent optional ones are `None`).
/// `names` carries bound variable names (`$let`, `$map`'s `as`, ...).
#[derive(Clone, Debug, Default)]
pub(crate) struct Args {
    exprs: Vec<Option<Expr>>,
    names: Vec<String>,
}

impl Args {
    fn positional(exprs: Vec<Expr>) -> Args {
        Args { exprs: exprs.into_iter().map(Some).collect(), names: Vec::new() }
    }

    fn len(&self) -> usize {
        self.exprs.len()
    }

    /// The expression at `index`, if present.
    fn get(&self, index: usize) -> Option<&Expr> {
        self.exprs.get(index).and_then(|e| e.as_ref())
    }

    /// Evaluates the argument at `index`; an absent argument is missing.
    fn eval(&self, index: usize, cx: &Context) -> Result<Value, QueryError> {
        match self.get(index) {
            Some(expr) => expr.eval(cx),
            None => Ok(None),
        }
    }

    /// Evaluates every argument in order.
    fn eval_all(&self, cx: &Context) -> Result<Vec<Value>, QueryError> {
        (0..self.len()).map(|i| self.eval(i, cx)).collect()
    }
}

type EvalFn = fn(&'static str, &Args, &Context) -> Result<Value, QueryError>;
type ParseFn = fn(&'static OpSpec, &Bson) -> Result<Args, QueryError>;

/// How an operator takes its arguments.
#[derive(Debug)]
pub(crate) enum ArgStyle {
    /// An array of expressions (or one non-array expression) of a count
    /// within `min..=max`.
    Positional { min: usize, max: usize },
    /// A document of named arguments.
    Named { required: &'static [&'static str], optional: &'static [&'static str] },
    /// The operator parses its own arguments.
    Custom(ParseFn),
}

/// One expression operator: its name, argument style and evaluator.
pub(crate) struct OpSpec {
    pub name: &'static str,
    pub style: ArgStyle,
    pub eval: EvalFn,
}

impl std::fmt::Debug for OpSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name)
    }
}

/// Named bindings visible to an expression: the system variables
/// `$$ROOT`, `$$NOW` and the user variables bound by `$let`, `$map`,
/// `$filter`, `$reduce` and `$lookup`'s `let`.
#[derive(Clone, Debug, Default)]
pub struct Variables {
    /// `$$ROOT` when it differs from the document being evaluated;
    /// `None` means `$$ROOT` is the evaluated document itself. Shared, so
    /// that binding a variable (which clones `Variables`) stays cheap.
    root: Option<std::sync::Arc<Document>>,
    now: Option<bson::DateTime>,
    /// Innermost binding last, so lookups scan from the end.
    /// A binding may hold a missing value (`$let` of an absent field).
    bindings: Vec<(String, Value)>,
    /// The operation's collation, which every string comparison of an
    /// expression follows (`$eq`, `$in`, `$min`, the set operators, ...);
    /// carried here because every evaluation already receives the
    /// variables. `None` is the simple (binary) collation.
    collation: CollationRef,
}

impl Variables {
    /// Variables for evaluating expressions over `root` (which becomes
    /// `$$ROOT`). `$$NOW` is unset until `with_now`.
    pub fn new(root: &Document) -> Variables {
        Variables { root: Some(std::sync::Arc::new(root.clone())), now: None, bindings: Vec::new(), collation: None }
    }

    /// Variables whose `$$ROOT` is whichever document is evaluated.
    pub fn empty() -> Variables {
        Variables::default()
    }

    /// Sets `$$ROOT` to `root` while other documents (sub-documents, for
    /// `$redact`) are evaluated as `$$CURRENT`.
    pub fn with_root(mut self, root: &Document) -> Variables {
        self.root = Some(std::sync::Arc::new(root.clone()));
        self
    }

    /// Sets `$$NOW` (the pipeline passes the time of the command).
    pub fn with_now(mut self, now: bson::DateTime) -> Variables {
        self.now = Some(now);
        self
    }

    /// Puts every comparison of the expressions evaluated with these
    /// variables under `collation` (`None`: simple).
    pub fn with_collation(mut self, collation: CollationRef) -> Variables {
        self.collation = collation;
        self
    }

    /// The collation comparisons follow (`None`: simple).
    pub fn collation(&self) -> Option<&Collation> {
        self.collation.as_deref()
    }

    /// The collation, shared, for what keeps it (a sort specification).
    pub fn collation_ref(&self) -> CollationRef {
        self.collation.clone()
    }

    /// Binds a user variable (shadowing an outer one of the same name).
    pub fn bind(&mut self, name: impl Into<String>, value: Bson) {
        self.bindings.push((name.into(), Some(value)));
    }

    /// The variables of a command with a `let` option (find, aggregate,
    /// update, delete, findAndModify; MongoDB 5.0+): `$$NOW` is `now`, and
    /// each `let` field is evaluated once, in order, as a constant that the
    /// filter's `$expr`, pipeline-style updates and aggregation stages see
    /// as `$$name`. A later field may use an earlier one (MongoDB parses
    /// them in one scope). Errors follow MongoDB 7.0's
    /// `seedVariablesWithLetParameters`: an invalid user variable name is
    /// FailedToParse (9), a system constant (`NOW`, `CLUSTER_TIME`,
    /// `USER_ROLES`, ...) is 4738901, and an expression that reads a document field
    /// (`$a`, `$$ROOT`, `$$CURRENT`) is 4890500. Pass an empty document
    /// when the command has no `let`.
    pub fn with_let(let_doc: &Document, now: bson::DateTime) -> Result<Variables, QueryError> {
        let mut vars = Variables::empty().with_now(now);
        for (name, value) in let_doc {
            if LET_SYSTEM_CONSTANTS.contains(&name.as_str()) {
                return Err(QueryError::new(
                    4738901,
                    format!("Attempt to set internal constant: {name}"),
                ));
            }
            validate_variable_name(name, false).map_err(|e| {
                QueryError::new(e.code, format!("Invalid 'let' parameter :: caused by :: {}", e.message))
            })?;
            let expr = Expr::parse(value)?;
            if expr.reads_document() {
                return Err(QueryError::new(
                    4890500,
                    "Command let Expression tried to access a field, but this is not allowed because Command let Expressions run before the query examines any documents.",
                ));
            }
            let result = expr.evaluate_optional(&Document::new(), &vars)?;
            vars.bindings.push((name.clone(), result));
        }
        Ok(vars)
    }

    /// `$$NOW`, if set.
    pub fn now(&self) -> Option<bson::DateTime> {
        self.now
    }

    fn lookup(&self, name: &str) -> Option<&Value> {
        self.bindings.iter().rev().find(|(n, _)| n == name).map(|(_, v)| v)
    }
}

/// What an evaluation sees: the current document and the variables.
pub(crate) struct Context<'a> {
    current: &'a Document,
    vars: &'a Variables,
}

impl<'a> Context<'a> {
    /// Runs `f` with additional variable bindings.
    fn with_bindings<T>(
        &self,
        bindings: Vec<(String, Value)>,
        f: impl FnOnce(&Context) -> T,
    ) -> T {
        let mut vars = self.vars.clone();
        vars.bindings.extend(bindings);
        f(&Context { current: self.current, vars: &vars })
    }

    /// Compares two values under the operation's collation: the one
    /// comparison every expression operator uses.
    pub(crate) fn compare(&self, a: &Value, b: &Value) -> Ordering {
        compare_optional_with(self.vars.collation(), a, b)
    }

    /// `compare` of two present values.
    pub(crate) fn compare_present(&self, a: &Bson, b: &Bson) -> Ordering {
        compare_with(self.vars.collation(), a, b)
    }

    /// Whether two present values are equal under the collation.
    pub(crate) fn equal(&self, a: &Bson, b: &Bson) -> bool {
        compare_with(self.vars.collation(), a, b).is_eq()
    }
}

/// Every operator table, searched in order by `parse`.
fn operator_tables() -> [&'static [OpSpec]; 16] {
    [
        date_parts::OPERATORS,
        array_ordering::OPERATORS,
        trigonometry::OPERATORS,
        date_math::OPERATORS,
        sets::OPERATORS,
        accumulators::OPERATORS,
        conditional::OPERATORS,
        arithmetic::OPERATORS,
        strings::OPERATORS,
        arrays::OPERATORS,
        types::OPERATORS,
        dates::OPERATORS,
        objects::OPERATORS,
        random::OPERATORS,
        javascript::OPERATORS,
        quantiles::OPERATORS,
    ]
}

fn find_operator(name: &str) -> Option<&'static OpSpec> {
    operator_tables().into_iter().flat_map(|t| t.iter()).find(|spec| spec.name == name)
}

impl Expr {
    /// Parses an aggregation expression.
    pub fn parse(value: &Bson) -> Result<Expr, QueryError> {
        let node = match value {
            Bson::String(s) if s.starts_with("$$") => parse_variable(&s[2..])?,
            Bson::String(s) if s.starts_with('$') => Node::Field(parse_field_path(&s[1..])?),
            Bson::Document(d) => return parse_document(d),
            Bson::Array(items) => {
                Node::Array(items.iter().map(Expr::parse).collect::<Result<_, _>>()?)
            }
            other => Node::Literal(other.clone()),
        };
        Ok(Expr { node })
    }

    /// An expression that evaluates to `value` as is.
    pub fn literal(value: Bson) -> Expr {
        Expr { node: Node::Literal(value) }
    }

    /// Evaluates over `root` (as `$$CURRENT`); a missing result is null.
    pub fn evaluate(&self, root: &Document, vars: &Variables) -> Result<Bson, QueryError> {
        Ok(self.evaluate_optional(root, vars)?.unwrap_or(Bson::Null))
    }

    /// Evaluates over `root`; `None` when the result is missing (so that
    /// `$project`/`$addFields` can leave the field out).
    pub fn evaluate_optional(&self, root: &Document, vars: &Variables) -> Result<Value, QueryError> {
        self.eval(&Context { current: root, vars })
    }

    /// The field path of an expression like `"$a.b"`, if it is one.
    pub fn as_field_path(&self) -> Option<&[String]> {
        match &self.node {
            Node::Field(path) => Some(path),
            _ => None,
        }
    }

    /// The constant value of a literal expression, if it is one.
    pub fn as_literal(&self) -> Option<&Bson> {
        match &self.node {
            Node::Literal(value) => Some(value),
            _ => None,
        }
    }

    /// Whether evaluating may read the document: a field path, or
    /// `$$ROOT`/`$$CURRENT`.
    /// The value of an expression that reads neither a document nor a
    /// variable (`[0.5, {$divide: [1, 4]}]`); `None` otherwise.
    pub(crate) fn constant_value(&self) -> Option<Bson> {
        if self.reads_document() || self.reads_variable() {
            return None;
        }
        self.evaluate(&Document::new(), &Variables::empty()).ok()
    }

    fn reads_variable(&self) -> bool {
        match &self.node {
            Node::Literal(_) | Node::Field(_) => false,
            Node::Variable { .. } => true,
            Node::Object(fields) => fields.iter().any(|(_, e)| e.reads_variable()),
            Node::Array(items) => items.iter().any(Expr::reads_variable),
            Node::Operator { args, .. } => args.exprs.iter().flatten().any(Expr::reads_variable),
        }
    }

    fn reads_document(&self) -> bool {
        match &self.node {
            Node::Literal(_) => false,
            Node::Field(_) => true,
            Node::Variable { name, .. } => name == "ROOT" || name == "CURRENT",
            Node::Object(fields) => fields.iter().any(|(_, e)| e.reads_document()),
            Node::Array(items) => items.iter().any(Expr::reads_document),
            Node::Operator { args, .. } => args.exprs.iter().flatten().any(Expr::reads_document),
        }
    }

    fn eval(&self, cx: &Context) -> Result<Value, QueryError> {
        match &self.node {
            Node::Literal(value) => Ok(Some(value.clone())),
            Node::Field(path) => Ok(lookup_path_in_document(cx.current, path)),
            Node::Variable { name, path } => eval_variable(name, path, cx),
            Node::Object(fields) => {
                let mut out = Document::new();
                for (name, expr) in fields {
                    if let Some(value) = expr.eval(cx)? {
                        out.insert(name.clone(), value);
                    }
                }
                Ok(Some(Bson::Document(out)))
            }
            Node::Array(items) => {
                let mut out = Vec::with_capacity(items.len());
                for item in items {
                    // A missing element of an array literal becomes null.
                    out.push(item.eval(cx)?.unwrap_or(Bson::Null));
                }
                Ok(Some(Bson::Array(out)))
            }
            Node::Operator { spec, args } => (spec.eval)(spec.name, args, cx),
        }
    }
}

fn parse_document(d: &Document) -> Result<Expr, QueryError> {
    let first_is_operator = d.keys().next().is_some_and(|k| k.starts_with('$'));
    if first_is_operator {
        if d.len() != 1 {
            return Err(QueryError::new(
                15983,
                format!(
                    "An object representing an expression must have exactly one field: {d}"
                ),
            ));
        }
        let (name, operand) = d.iter().next().expect("one field checked above");
        return parse_operator(name, operand);
    }
    let mut fields = Vec::with_capacity(d.len());
    for (name, value) in d {
        if name.starts_with('$') {
            return Err(QueryError::new(
                16404,
                format!("Field name '{name}' is invalid: an expression object may not mix operators and fields"),
            ));
        }
        if name.contains('.') {
            return Err(QueryError::new(
                16412,
                format!("FieldPath field names may not contain '.'. Consider using $getField or $setField. ('{name}')"),
            ));
        }
        fields.push((name.clone(), Expr::parse(value)?));
    }
    Ok(Expr { node: Node::Object(fields) })
}

fn parse_operator(name: &str, operand: &Bson) -> Result<Expr, QueryError> {
    if name == "$literal" {
        return Ok(Expr::literal(operand.clone()));
    }
    if UNSUPPORTED_OPERATORS.contains(&name) {
        return Err(QueryError::new(
            codes::COMMAND_NOT_SUPPORTED,
            format!("the expression operator {name} is not supported by Slipstream"),
        ));
    }
    let Some(spec) = find_operator(name) else {
        return Err(QueryError::new(
            codes::INVALID_PIPELINE_OPERATOR,
            format!("Unrecognized expression '{name}'"),
        ));
    };
    let args = match &spec.style {
        ArgStyle::Positional { min, max } => parse_positional(spec.name, operand, *min, *max)?,
        ArgStyle::Named { required, optional } => {
            parse_named(spec.name, operand, required, optional)?
        }
        ArgStyle::Custom(parse) => parse(spec, operand)?,
    };
    Ok(Expr { node: Node::Operator { spec, args } })
}

/// Expression operators MongoDB 7.0 has that Slipstream does not: they
/// answer CommandNotSupported naming the operator, so that users can tell
/// a gap from a typo (which answers 168, "Unrecognized expression").
const UNSUPPORTED_OPERATORS: &[&str] = &[
    "$top", "$topN", "$bottom", "$bottomN",
    "$accumulator", "$meta", "$toDecimal",
    "$toHashedIndexKey",
];

fn parse_positional(name: &str, operand: &Bson, min: usize, max: usize) -> Result<Args, QueryError> {
    let exprs = match operand {
        Bson::Array(items) => items.iter().map(Expr::parse).collect::<Result<Vec<_>, _>>()?,
        single => vec![Expr::parse(single)?],
    };
    if exprs.len() < min || exprs.len() > max {
        let expected = if min == max { format!("{min}") } else { format!("between {min} and {max}") };
        return Err(QueryError::new(
            16020,
            format!("Expression {name} takes {expected} arguments. {} were passed in.", exprs.len()),
        ));
    }
    Ok(Args::positional(exprs))
}

/// Parses `{name: expr, ...}` into positions: required names first, then
/// optional ones, in the spec's order.
pub(crate) fn parse_named(
    name: &str,
    operand: &Bson,
    required: &[&str],
    optional: &[&str],
) -> Result<Args, QueryError> {
    let Bson::Document(d) = operand else {
        return Err(QueryError::failed_to_parse(format!(
            "{name} expects an object of named arguments but found {}",
            type_name(&Some(operand.clone()))
        )));
    };
    for key in d.keys() {
        if !required.contains(&key.as_str()) && !optional.contains(&key.as_str()) {
            return Err(QueryError::failed_to_parse(format!(
                "{name} found an unknown argument: {key}"
            )));
        }
    }
    let mut exprs = Vec::with_capacity(required.len() + optional.len());
    for key in required {
        match d.get(*key) {
            Some(value) => exprs.push(Some(Expr::parse(value)?)),
            None => {
                return Err(QueryError::failed_to_parse(format!(
                    "Missing '{key}' parameter to {name}"
                )))
            }
        }
    }
    for key in optional {
        exprs.push(d.get(*key).map(Expr::parse).transpose()?);
    }
    Ok(Args { exprs, names: Vec::new() })
}

fn parse_field_path(path: &str) -> Result<Vec<String>, QueryError> {
    if path.is_empty() {
        return Err(QueryError::new(16872, "'$' by itself is not a valid FieldPath"));
    }
    crate::depth::check_field_path(path)?;
    let parts: Vec<String> = path.split('.').map(str::to_string).collect();
    for part in &parts {
        if part.is_empty() {
            return Err(QueryError::new(15998, "FieldPath field names may not be empty strings."));
        }
        if part.starts_with('$') {
            return Err(QueryError::new(
                16410,
                format!("FieldPath field names may not start with '$'. Consider using $getField or $setField. ('{part}')"),
            ));
        }
    }
    Ok(parts)
}

fn parse_variable(text: &str) -> Result<Node, QueryError> {
    let mut parts = text.split('.');
    let name = parts.next().unwrap_or_default().to_string();
    validate_variable_name(&name, true)?;
    let rest: Vec<&str> = parts.collect();
    let path = if rest.is_empty() { Vec::new() } else { parse_field_path(&rest.join("."))? };
    Ok(Node::Variable { name, path })
}

/// The system variables (`$$NOW`, ...), which a user may not define.
const SYSTEM_VARIABLES: &[&str] = &[
    "ROOT", "CURRENT", "NOW", "REMOVE", "DESCEND", "PRUNE", "KEEP", "CLUSTER_TIME", "USER_ROLES",
    "SEARCH_META",
];

/// The system variables MongoDB lets only internal clients set through a
/// command's `let` (its `kSystemVarValidators`); other upper-case names
/// fail as invalid user variable names.
const LET_SYSTEM_CONSTANTS: &[&str] = &["NOW", "CLUSTER_TIME", "JS_SCOPE", "IS_MR", "USER_ROLES"];

/// Checks a variable name: user variables start with a lowercase letter
/// (or a non-ASCII character); system variables are upper case and only
/// valid when `allow_system` (a reference, not a definition).
pub(crate) fn validate_variable_name(name: &str, allow_system: bool) -> Result<(), QueryError> {
    let Some(first) = name.chars().next() else {
        return Err(QueryError::failed_to_parse("empty variable names are not allowed"));
    };
    let system = SYSTEM_VARIABLES.contains(&name);
    if allow_system && system {
        return Ok(());
    }
    let valid_first = first.is_ascii_lowercase() || !first.is_ascii();
    let valid_rest = name.chars().all(|c| c.is_alphanumeric() || c == '_' || !c.is_ascii());
    if !valid_first || !valid_rest {
        return Err(QueryError::failed_to_parse(format!(
            "'{name}' starts with an invalid character for a user variable name"
        )));
    }
    Ok(())
}

fn eval_variable(name: &str, path: &[String], cx: &Context) -> Result<Value, QueryError> {
    let base: Bson = match name {
        "CURRENT" => Bson::Document(cx.current.clone()),
        "ROOT" => Bson::Document(cx.vars.root.as_deref().unwrap_or(cx.current).clone()),
        "REMOVE" => return Ok(None),
        // `$redact`'s verdicts.
        "DESCEND" => Bson::String("descend".into()),
        "PRUNE" => Bson::String("prune".into()),
        "KEEP" => Bson::String("keep".into()),
        "NOW" => match cx.vars.now {
            Some(now) => Bson::DateTime(now),
            None => {
                return Err(QueryError::new(
                    codes::COMMAND_NOT_SUPPORTED,
                    "$$NOW is not available in this context",
                ))
            }
        },
        user => match cx.vars.lookup(user) {
            Some(Some(value)) => value.clone(),
            Some(None) => return Ok(None),
            None if matches!(user, "CLUSTER_TIME" | "USER_ROLES" | "SEARCH_META") => {
                return Err(QueryError::new(
                    codes::COMMAND_NOT_SUPPORTED,
                    format!("the system variable $${user} is not supported"),
                ))
            }
            None => {
                return Err(QueryError::new(17276, format!("Use of undefined variable: {user}")))
            }
        },
    };
    if path.is_empty() {
        return Ok(Some(base));
    }
    match base {
        Bson::Document(d) => Ok(lookup_path_in_document(&d, path)),
        Bson::Array(items) => Ok(Some(lookup_path_in_array(&items, path))),
        _ => Ok(None),
    }
}

/// Aggregation field path semantics: through documents by name, through
/// arrays by collecting the path from each document element (missing
/// results and non-document elements are skipped).
pub fn lookup_path_in_document(doc: &Document, path: &[String]) -> Value {
    let (first, rest) = path.split_first()?;
    let value = doc.get(first)?;
    if rest.is_empty() {
        return Some(value.clone());
    }
    match value {
        Bson::Document(inner) => lookup_path_in_document(inner, rest),
        Bson::Array(items) => Some(lookup_path_in_array(items, rest)),
        _ => None,
    }
}

fn lookup_path_in_array(items: &[Bson], path: &[String]) -> Bson {
    let mut out = Vec::new();
    for item in items {
        if let Bson::Document(inner) = item {
            if let Some(value) = lookup_path_in_document(inner, path) {
                out.push(value);
            }
        }
    }
    Bson::Array(out)
}

/// MongoDB's truthiness for `$expr`, `$cond`, `$and`, `$filter`: false,
/// null, undefined and numeric zero are false; everything else
/// (including empty strings and arrays) is true.
pub fn is_truthy(value: &Bson) -> bool {
    match value {
        Bson::Boolean(b) => *b,
        Bson::Null | Bson::Undefined => false,
        Bson::Int32(v) => *v != 0,
        Bson::Int64(v) => *v != 0,
        Bson::Double(v) => *v != 0.0,
        Bson::Decimal128(d) => crate::compare::decimal_to_f64(d) != 0.0,
        _ => true,
    }
}

/// Truthiness of a possibly missing value (missing is false).
pub(crate) fn truthy(value: &Value) -> bool {
    value.as_ref().is_some_and(is_truthy)
}

/// Compares two possibly missing values; missing orders below null and
/// equals only missing (MongoDB's `Value::compare`).
pub fn compare_optional(a: &Value, b: &Value) -> Ordering {
    compare_optional_with(None, a, b)
}

/// `compare_optional` under a collation (`None`: simple).
pub fn compare_optional_with(collation: Option<&Collation>, a: &Value, b: &Value) -> Ordering {
    match (a, b) {
        (None, None) => Ordering::Equal,
        (None, Some(_)) => Ordering::Less,
        (Some(_), None) => Ordering::Greater,
        (Some(x), Some(y)) => compare_with(collation, x, y),
    }
}

/// True when a value is null, undefined or missing (the "nullish" inputs
/// that make most operators answer null).
pub(crate) fn is_nullish(value: &Value) -> bool {
    matches!(value, None | Some(Bson::Null) | Some(Bson::Undefined))
}

/// The `$type` name of a value ("missing" for a missing one).
pub fn type_name(value: &Value) -> &'static str {
    match value {
        None => "missing",
        Some(value) => crate::compare::type_name(value),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    fn eval(expr: Bson, doc: Document) -> Result<Value, QueryError> {
        Expr::parse(&expr)?.evaluate_optional(&doc, &Variables::empty())
    }

    #[test]
    fn field_paths_traverse_arrays_of_documents() {
        let d = doc! {"a": [{"b": 1}, {"c": 2}, 5, {"b": [3]}]};
        assert_eq!(eval(Bson::from("$a.b"), d).unwrap(), Some(bson::bson!([1, [3]])));
    }

    #[test]
    fn missing_field_is_missing_not_null() {
        assert_eq!(eval(Bson::from("$nope"), doc! {}).unwrap(), None);
        assert_eq!(eval(bson::bson!({"x": "$nope", "y": 1}), doc! {}).unwrap(), Some(bson::bson!({"y": 1})));
    }

    #[test]
    fn unknown_operator_is_error_168() {
        let err = Expr::parse(&bson::bson!({"$foo": 1})).unwrap_err();
        assert_eq!(err.code, 168);
        assert_eq!(err.message, "Unrecognized expression '$foo'");
    }

    #[test]
    fn truthiness() {
        assert!(!is_truthy(&Bson::Int64(0)));
        assert!(!is_truthy(&Bson::Null));
        assert!(is_truthy(&Bson::Array(vec![])));
        assert!(is_truthy(&Bson::String(String::new())));
    }
}
