//! Aggregation expressions through the public API: MongoDB's documented
//! examples, the missing-versus-null rules, variables, parse errors, and
//! property tests of the number rules against plain integer arithmetic.

use std::cmp::Ordering;

use bson::{bson, doc, Bson, Document};
use proptest::prelude::*;
use slipstream_query::compare::compare_values;
use slipstream_query::expr::{is_truthy, Expr, Variables};
use slipstream_query::QueryError;

fn eval_on(expr: Bson, doc: &Document) -> Result<Bson, QueryError> {
    Expr::parse(&expr)?.evaluate(doc, &Variables::empty())
}

fn eval(expr: Bson) -> Result<Bson, QueryError> {
    eval_on(expr, &doc! {})
}

#[test]
fn unknown_operator_and_bad_arity_are_parse_errors() {
    let err = Expr::parse(&bson!({"$foo": [1, 2]})).unwrap_err();
    assert_eq!((err.code, err.message.as_str()), (168, "Unrecognized expression '$foo'"));
    let err = Expr::parse(&bson!({"$eq": [1]})).unwrap_err();
    assert_eq!(err.code, 16020);
    assert_eq!(Expr::parse(&bson!({"$add": [1], "$sub": 2})).unwrap_err().code, 15983);
    assert_eq!(Expr::parse(&bson!({"a": 1, "$add": 2})).unwrap_err().code, 16404);
    assert_eq!(Expr::parse(&bson!("$")).unwrap_err().code, 16872);
    assert_eq!(Expr::parse(&bson!("$a..b")).unwrap_err().code, 15998);
    assert_eq!(Expr::parse(&bson!({"$trim": {"input": "x", "bogus": 1}})).unwrap_err().code, 9);
}

#[test]
fn known_but_unsupported_operators_name_themselves() {
    for op in ["$top", "$accumulator", "$toDecimal", "$meta"] {
        let err = Expr::parse(&bson!({op: [1]})).unwrap_err();
        assert_eq!(err.code, 115, "{op}");
        assert!(err.message.contains(op), "{}", err.message);
    }
}

#[test]
fn nested_unknown_operator_is_found_at_parse_time() {
    let err = Expr::parse(&bson!({"$cond": [true, {"$nope": 1}, 0]})).unwrap_err();
    assert_eq!(err.code, 168);
}

#[test]
fn literal_keeps_dollar_strings() {
    assert_eq!(eval(bson!({"$literal": "$1"})).unwrap(), Bson::from("$1"));
    assert_eq!(eval(bson!({"$literal": {"$add": [1, 2]}})).unwrap(), bson!({"$add": [1, 2]}));
}

#[test]
fn missing_is_distinct_from_null() {
    let d = doc! {"n": null};
    assert_eq!(eval_on(bson!({"$type": "$x"}), &d).unwrap(), Bson::from("missing"));
    assert_eq!(eval_on(bson!({"$eq": ["$x", null]}), &d).unwrap(), Bson::Boolean(false));
    assert_eq!(eval_on(bson!({"$eq": ["$x", "$y"]}), &d).unwrap(), Bson::Boolean(true));
    assert_eq!(eval_on(bson!({"$ifNull": ["$x", "d"]}), &d).unwrap(), Bson::from("d"));
    let expr = Expr::parse(&bson!("$x")).unwrap();
    assert_eq!(expr.evaluate_optional(&d, &Variables::empty()).unwrap(), None);
    assert_eq!(expr.evaluate(&d, &Variables::empty()).unwrap(), Bson::Null);
    // A missing element of an array literal becomes null.
    assert_eq!(eval_on(bson!(["$x", 1]), &d).unwrap(), bson!([null, 1]));
}

#[test]
fn root_current_and_user_variables() {
    let root = doc! {"a": {"b": 5}, "c": 2};
    let mut vars = Variables::new(&root);
    vars.bind("factor", Bson::Int32(10));
    let expr = Expr::parse(&bson!({"$multiply": ["$$ROOT.a.b", "$$factor", "$$CURRENT.c"]})).unwrap();
    assert_eq!(expr.evaluate(&root, &vars).unwrap(), Bson::Int32(100));
    // $$ROOT stays the root while $$CURRENT is the evaluated document.
    let inner = doc! {"c": 3};
    assert_eq!(expr.evaluate(&inner, &vars).unwrap(), Bson::Int32(150));
    let err = Expr::parse(&bson!("$$NOW")).unwrap().evaluate(&root, &Variables::empty()).unwrap_err();
    assert_eq!(err.code, 115);
    let now = bson::DateTime::from_millis(42);
    assert_eq!(Expr::parse(&bson!("$$NOW")).unwrap().evaluate(&root, &Variables::empty().with_now(now)).unwrap(), Bson::DateTime(now));
}

#[test]
fn let_shadows_and_map_nests() {
    let expr = bson!({"$let": {"vars": {"x": 1}, "in": {"$let": {"vars": {"x": {"$add": ["$$x", 1]}}, "in": "$$x"}}}});
    assert_eq!(eval(expr).unwrap(), Bson::Int32(2));
    let grid = bson!({"$map": {"input": [[1, 2], [3]], "as": "row", "in": {"$map": {"input": "$$row", "in": {"$multiply": ["$$this", 2]}}}}});
    assert_eq!(eval(grid).unwrap(), bson!([[2, 4], [6]]));
}

#[test]
fn documented_examples_across_families() {
    let d = doc! {"item": "abc1", "qty": 300, "price": 10.5, "tags": ["school", "book"], "dims": {"h": 2, "w": 3}};
    let cases = vec![
        (bson!({"$cmp": ["$qty", 250]}), bson!(1)),
        (bson!({"$concat": ["$item", " - ", {"$toUpper": "$item"}]}), bson!("abc1 - ABC1")),
        (bson!({"$cond": {"if": {"$gte": ["$qty", 250]}, "then": 30, "else": 20}}), bson!(30)),
        (bson!({"$multiply": ["$price", "$qty"]}), bson!(3150.0)),
        (bson!({"$size": "$tags"}), bson!(2)),
        (bson!({"$in": ["book", "$tags"]}), bson!(true)),
        (bson!({"$arrayElemAt": ["$tags", 0]}), bson!("school")),
        (bson!({"$objectToArray": "$dims"}), bson!([{"k": "h", "v": 2}, {"k": "w", "v": 3}])),
        (bson!({"$mergeObjects": ["$dims", {"d": 1}]}), bson!({"h": 2, "w": 3, "d": 1})),
        (bson!({"$toString": "$qty"}), bson!("300")),
        (bson!({"$split": ["a,b,c", ","]}), bson!(["a", "b", "c"])),
        (bson!({"$isArray": "$tags"}), bson!(true)),
        (bson!({"$switch": {"branches": [{"case": {"$eq": ["$qty", 300]}, "then": "exact"}], "default": "no"}}), bson!("exact")),
    ];
    for (expr, expected) in cases {
        assert_eq!(eval_on(expr.clone(), &d).unwrap(), expected, "{expr}");
    }
}

#[test]
fn truthiness_matches_mongodb() {
    for falsy in [bson!(false), bson!(null), bson!(0), bson!(0.0), Bson::Int64(0), Bson::Undefined] {
        assert!(!is_truthy(&falsy), "{falsy}");
    }
    for truthy in [bson!(true), bson!(1), bson!(""), bson!([]), bson!({}), bson!(-0.5)] {
        assert!(is_truthy(&truthy), "{truthy}");
    }
}

/// The type `$add`/`$multiply` of two ints should produce, computed
/// naively with 128-bit integers.
fn naive_int_result(value: i128, any_long: bool) -> Bson {
    if !any_long {
        if let Ok(v) = i32::try_from(value) {
            return Bson::Int32(v);
        }
    }
    match i64::try_from(value) {
        Ok(v) => Bson::Int64(v),
        Err(_) => Bson::Double(value as f64),
    }
}

fn int_or_long() -> impl Strategy<Value = Bson> {
    prop_oneof![
        any::<i32>().prop_map(Bson::Int32),
        any::<i64>().prop_map(Bson::Int64),
        (-100i32..100).prop_map(Bson::Int32),
    ]
}

fn as_i128(value: &Bson) -> (i128, bool) {
    match value {
        Bson::Int32(v) => (i128::from(*v), false),
        Bson::Int64(v) => (i128::from(*v), true),
        other => panic!("not an integer: {other}"),
    }
}

proptest! {
    #[test]
    fn add_and_multiply_follow_the_widening_rules(a in int_or_long(), b in int_or_long()) {
        let (x, long_x) = as_i128(&a);
        let (y, long_y) = as_i128(&b);
        let long = long_x || long_y;
        let sum = eval(bson!({"$add": [a.clone(), b.clone()]})).unwrap();
        prop_assert_eq!(sum, naive_int_result(x + y, long));
        let product = eval(bson!({"$multiply": [a.clone(), b.clone()]})).unwrap();
        prop_assert_eq!(product, naive_int_result(x * y, long));
    }

    #[test]
    fn comparison_operators_agree_with_bson_order(a in int_or_long(), b in prop_oneof![int_or_long(), "[a-z]{0,3}".prop_map(Bson::String)]) {
        let order = compare_values(&a, &b);
        let cmp = eval(bson!({"$cmp": [a.clone(), b.clone()]})).unwrap();
        let expected = match order { Ordering::Less => -1, Ordering::Equal => 0, Ordering::Greater => 1 };
        prop_assert_eq!(cmp, Bson::Int32(expected));
        prop_assert_eq!(eval(bson!({"$lt": [a.clone(), b.clone()]})).unwrap(), Bson::Boolean(order == Ordering::Less));
        prop_assert_eq!(eval(bson!({"$gte": [a, b]})).unwrap(), Bson::Boolean(order != Ordering::Less));
    }

    #[test]
    fn split_then_join_round_trips(parts in prop::collection::vec("[a-z]{0,4}", 1..6)) {
        let joined = parts.join(",");
        let split = eval(bson!({"$split": [joined.clone(), ","]})).unwrap();
        prop_assert_eq!(split, Bson::Array(parts.iter().cloned().map(Bson::String).collect()));
        // Rejoin with $reduce, adding a separator only after a non-empty
        // prefix; the reference applies the same rule with a String.
        let rejoined = eval(bson!({"$reduce": {"input": {"$split": [joined.clone(), ","]}, "initialValue": "",
            "in": {"$concat": ["$$value", {"$cond": [{"$eq": ["$$value", ""]}, "", ","]}, "$$this"]}}})).unwrap();
        let mut reference = String::new();
        for part in &parts {
            if !reference.is_empty() {
                reference.push(',');
            }
            reference.push_str(part);
        }
        prop_assert_eq!(rejoined, Bson::String(reference));
    }
}
