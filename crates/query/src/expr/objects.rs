//! Object operators: `$mergeObjects`, `$objectToArray`,
//! `$arrayToObject`, `$getField`.

use bson::{Bson, Document};

use super::{is_nullish, parse_named, type_name, ArgStyle, Args, Context, Expr, OpSpec, Value};
use crate::error::QueryError;

pub(super) static OPERATORS: &[OpSpec] = &[
    OpSpec { name: "$mergeObjects", style: ArgStyle::Positional { min: 0, max: usize::MAX }, eval: eval_merge_objects },
    OpSpec { name: "$objectToArray", style: ArgStyle::Positional { min: 1, max: 1 }, eval: eval_object_to_array },
    OpSpec { name: "$arrayToObject", style: ArgStyle::Positional { min: 1, max: 1 }, eval: eval_array_to_object },
    OpSpec { name: "$getField", style: ArgStyle::Custom(parse_get_field), eval: eval_get_field },
    OpSpec { name: "$setField", style: ArgStyle::Named { required: &["field", "input", "value"], optional: &[] }, eval: eval_set_field },
    OpSpec { name: "$unsetField", style: ArgStyle::Named { required: &["field", "input"], optional: &[] }, eval: eval_set_field },
    OpSpec { name: "$bsonSize", style: ArgStyle::Positional { min: 1, max: 1 }, eval: eval_bson_size },
    OpSpec { name: "$binarySize", style: ArgStyle::Positional { min: 1, max: 1 }, eval: eval_binary_size },
];

/// Merges `source` into `target`: later fields overwrite earlier ones.
/// Nullish sources are skipped; anything else but a document is an error.
pub(crate) fn merge_into(target: &mut Document, source: &Value) -> Result<(), QueryError> {
    match source {
        None | Some(Bson::Null | Bson::Undefined) => Ok(()),
        Some(Bson::Document(d)) => {
            for (k, v) in d {
                target.insert(k.clone(), v.clone());
            }
            Ok(())
        }
        other => Err(QueryError::new(
            40400,
            format!("$mergeObjects requires object inputs, but input {} is of type {}", other.clone().unwrap_or(Bson::Null), type_name(other)),
        )),
    }
}

fn eval_merge_objects(_: &'static str, args: &Args, cx: &Context) -> Result<Value, QueryError> {
    let mut out = Document::new();
    for value in args.eval_all(cx)? {
        merge_into(&mut out, &value)?;
    }
    Ok(Some(Bson::Document(out)))
}

fn eval_object_to_array(_: &'static str, args: &Args, cx: &Context) -> Result<Value, QueryError> {
    let value = args.eval(0, cx)?;
    if is_nullish(&value) {
        return Ok(Some(Bson::Null));
    }
    let Some(Bson::Document(d)) = value else {
        return Err(QueryError::new(40390, format!("$objectToArray requires a document input, found: {}", type_name(&value))));
    };
    let pairs = d
        .into_iter()
        .map(|(k, v)| {
            let mut pair = Document::new();
            pair.insert("k", k);
            pair.insert("v", v);
            Bson::Document(pair)
        })
        .collect();
    Ok(Some(Bson::Array(pairs)))
}

fn eval_array_to_object(_: &'static str, args: &Args, cx: &Context) -> Result<Value, QueryError> {
    let value = args.eval(0, cx)?;
    if is_nullish(&value) {
        return Ok(Some(Bson::Null));
    }
    let Some(Bson::Array(items)) = value else {
        return Err(QueryError::new(40386, format!("$arrayToObject requires an array input, found: {}", type_name(&value))));
    };
    let mut out = Document::new();
    for item in items {
        let (key, value) = key_value(&item)?;
        if key.contains('\0') {
            return Err(QueryError::new(4940400, "Key field cannot contain an embedded null byte"));
        }
        out.insert(key, value);
    }
    Ok(Some(Bson::Document(out)))
}

/// One entry of `$arrayToObject`: `[k, v]` or `{k, v}`.
fn key_value(item: &Bson) -> Result<(String, Bson), QueryError> {
    match item {
        Bson::Array(pair) if pair.len() == 2 => match &pair[0] {
            Bson::String(k) => Ok((k.clone(), pair[1].clone())),
            other => Err(QueryError::new(40395, format!("$arrayToObject requires an array of key-value pairs, where the key must be of type string. Found key type: {}", type_name(&Some(other.clone()))))),
        },
        Bson::Document(d) if d.len() == 2 && d.contains_key("k") && d.contains_key("v") => match d.get("k") {
            Some(Bson::String(k)) => Ok((k.clone(), d.get("v").cloned().unwrap_or(Bson::Null))),
            other => Err(QueryError::new(40394, format!("$arrayToObject requires an object with keys 'k' and 'v', where the value of 'k' must be of type string. Found type: {}", type_name(&other.cloned())))),
        },
        other => Err(QueryError::new(40398, format!("Unrecognised input type format for $arrayToObject: {}", type_name(&Some(other.clone()))))),
    }
}

/// `$getField: "name"` or `{field, input}` at positions `[field, input]`;
/// the default input is `$$CURRENT`.
fn parse_get_field(spec: &'static OpSpec, operand: &Bson) -> Result<Args, QueryError> {
    match operand {
        Bson::Document(d) if d.contains_key("field") => parse_named(spec.name, operand, &["field"], &["input"]),
        Bson::String(field) if !field.starts_with('$') => {
            Ok(Args::positional(vec![Expr::literal(Bson::String(field.clone()))]))
        }
        _ => Err(QueryError::new(5467500, "$getField requires 'field' to be a constant string or an object with 'field' and 'input'")),
    }
}

fn eval_get_field(name: &'static str, args: &Args, cx: &Context) -> Result<Value, QueryError> {
    let Some(Bson::String(field)) = args.eval(0, cx)? else {
        return Err(QueryError::new(3041704, format!("{name} requires 'field' to evaluate to type String")));
    };
    let input = match args.get(1) {
        Some(_) => args.eval(1, cx)?,
        None => Some(Bson::Document(cx.current.clone())),
    };
    match input {
        None | Some(Bson::Null | Bson::Undefined) => Ok(None),
        Some(Bson::Document(d)) => Ok(d.get(&field).cloned()),
        // MongoDB answers missing for a non-document input.
        Some(_) => Ok(None),
    }
}

/// `$setField: {field, input, value}` and `$unsetField: {field, input}`
/// (a `value` of `$$REMOVE` also removes). The field name is taken
/// literally, dots and dollars included.
fn eval_set_field(name: &'static str, args: &Args, cx: &Context) -> Result<Value, QueryError> {
    let Some(Bson::String(field)) = args.eval(0, cx)? else {
        return Err(QueryError::new(4161106, format!("{name} requires 'field' to evaluate to type String")));
    };
    let input = args.eval(1, cx)?;
    let mut doc = match input {
        None | Some(Bson::Null | Bson::Undefined) => return Ok(Some(Bson::Null)),
        Some(Bson::Document(d)) => d,
        other => {
            return Err(QueryError::new(4161105, format!("{name} requires 'input' to evaluate to type Object, found {}", type_name(&other))))
        }
    };
    let value = if name == "$unsetField" { None } else { args.eval(2, cx)? };
    match value {
        Some(v) => {
            doc.insert(field, v);
        }
        None => {
            doc.remove(&field);
        }
    }
    Ok(Some(Bson::Document(doc)))
}

fn eval_bson_size(name: &'static str, args: &Args, cx: &Context) -> Result<Value, QueryError> {
    match args.eval(0, cx)? {
        None | Some(Bson::Null | Bson::Undefined) => Ok(Some(Bson::Null)),
        Some(Bson::Document(d)) => {
            let bytes = d.to_vec().map_err(|e| QueryError::new(31393, format!("{name}: {e}")))?;
            Ok(Some(Bson::Int32(i32::try_from(bytes.len()).unwrap_or(i32::MAX))))
        }
        other => Err(QueryError::new(31393, format!("{name} requires a document input, found: {}", type_name(&other)))),
    }
}

fn eval_binary_size(name: &'static str, args: &Args, cx: &Context) -> Result<Value, QueryError> {
    let size = match args.eval(0, cx)? {
        None | Some(Bson::Null | Bson::Undefined) => return Ok(Some(Bson::Null)),
        Some(Bson::String(s)) => s.len(),
        Some(Bson::Binary(b)) => b.bytes.len(),
        other => {
            return Err(QueryError::new(51276, format!("{name} requires a string or BinData argument, found: {}", type_name(&other))))
        }
    };
    Ok(Some(Bson::Int32(i32::try_from(size).unwrap_or(i32::MAX))))
}

#[cfg(test)]
mod tests {
    use crate::expr::{Expr, Variables};
    use bson::{bson, doc, Bson};

    fn eval(expr: Bson) -> Result<Bson, crate::QueryError> {
        let d = doc! {"a": {"x": 1, "y": 2}, "b": {"y": 3, "z": 4}, "price.usd": 45, "n": null};
        Expr::parse(&expr)?.evaluate(&d, &Variables::empty())
    }

    #[test]
    fn merge_and_convert_objects() {
        assert_eq!(eval(bson!({"$mergeObjects": ["$a", "$b", "$n"]})).unwrap(), bson!({"x": 1, "y": 3, "z": 4}));
        assert_eq!(eval(bson!({"$mergeObjects": ["$a", 5]})).unwrap_err().code, 40400);
        assert_eq!(eval(bson!({"$objectToArray": "$a"})).unwrap(), bson!([{"k": "x", "v": 1}, {"k": "y", "v": 2}]));
        assert_eq!(eval(bson!({"$arrayToObject": [[["item", "abc123"], ["qty", 25]]]})).unwrap(), bson!({"item": "abc123", "qty": 25}));
        assert_eq!(eval(bson!({"$arrayToObject": [[{"k": "item", "v": "abc123"}]]})).unwrap(), bson!({"item": "abc123"}));
        assert_eq!(eval(bson!({"$arrayToObject": {"$objectToArray": "$b"}})).unwrap(), bson!({"y": 3, "z": 4}));
    }

    #[test]
    fn get_field_reads_names_with_dots() {
        assert_eq!(eval(bson!({"$getField": "price.usd"})).unwrap(), Bson::Int32(45));
        assert_eq!(eval(bson!({"$getField": {"field": "x", "input": "$a"}})).unwrap(), Bson::Int32(1));
        assert_eq!(eval(bson!({"$getField": {"field": "q", "input": "$a"}})).unwrap(), Bson::Null);
    }

    #[test]
    fn set_unset_and_sizes() {
        assert_eq!(eval(bson!({"$setField": {"field": "a.b", "input": "$a", "value": 5}})).unwrap(), bson!({"x": 1, "y": 2, "a.b": 5}));
        assert_eq!(eval(bson!({"$setField": {"field": "x", "input": "$a", "value": "$$REMOVE"}})).unwrap(), bson!({"y": 2}));
        assert_eq!(eval(bson!({"$unsetField": {"field": "y", "input": "$a"}})).unwrap(), bson!({"x": 1}));
        assert_eq!(eval(bson!({"$unsetField": {"field": "y", "input": "$n"}})).unwrap(), Bson::Null);
        // {x: 1, y: 2}: 4 (length) + 2 * (1 type + 2 name + 4 int) + 1 (end).
        assert_eq!(eval(bson!({"$bsonSize": "$a"})).unwrap(), Bson::Int32(19));
        assert_eq!(eval(bson!({"$binarySize": "café"})).unwrap(), Bson::Int32(5));
    }
}
