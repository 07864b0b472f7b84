//! JSON values printed the way Go prints the decoded `interface{}` with `%v`, and Go's type
//! names for them, so that strategic merge patch errors read exactly like upstream's
//! (`map: map[image:nginx] does not contain declared merge key: name`).

use serde_json::Value;

/// A value as Go's `%v` prints it after `json.Unmarshal` into `interface{}`: objects as
/// `map[k:v ...]` with sorted keys, lists as `[a b]`, strings bare, `null` as `<nil>`.
pub(crate) fn value(v: &Value) -> String {
    let mut out = String::new();
    write_value(&mut out, v);
    out
}

/// A list of values as `%v` prints a `[]interface{}`.
pub(crate) fn list(items: &[Value]) -> String {
    let mut out = String::new();
    write_list(&mut out, items);
    out
}

/// Go's `reflect.TypeOf(v)` name for a decoded JSON value (integers decode as `int64`).
pub(crate) fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "<nil>",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_i64() => "int64",
        Value::Number(_) => "float64",
        Value::String(_) => "string",
        Value::Array(_) => "[]interface {}",
        Value::Object(_) => "map[string]interface {}",
    }
}

/// Go's type name of a JSON object, the type a merge needs most often.
pub(crate) const MAP: &str = "map[string]interface {}";
/// Go's type name of a JSON list.
pub(crate) const SLICE: &str = "[]interface {}";

fn write_value(out: &mut String, v: &Value) {
    match v {
        Value::Null => out.push_str("<nil>"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => match n.as_i64() {
            Some(i) => out.push_str(&i.to_string()),
            None => out.push_str(&float(n.as_f64().unwrap_or_default())),
        },
        Value::String(s) => out.push_str(s),
        Value::Array(items) => write_list(out, items),
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push_str("map[");
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(' ');
                }
                out.push_str(key);
                out.push(':');
                write_value(out, &map[key.as_str()]);
            }
            out.push(']');
        }
    }
}

fn write_list(out: &mut String, items: &[Value]) {
    out.push('[');
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push(' ');
        }
        write_value(out, item);
    }
    out.push(']');
}

/// A float as Go's `%v` (`strconv.FormatFloat(f, 'g', -1, 64)` with the exponent switch at
/// 1e21 and 1e-4): `2.5`, `1e+21`, `1e-05`.
fn float(f: f64) -> String {
    let magnitude = f.abs();
    if magnitude != 0.0 && !(1e-4..1e21).contains(&magnitude) {
        let formatted = format!("{f:e}");
        let (mantissa, exponent) = formatted.split_once('e').unwrap_or((&formatted, "0"));
        let (sign, digits) = match exponent.strip_prefix('-') {
            Some(digits) => ('-', digits),
            None => ('+', exponent),
        };
        format!("{mantissa}e{sign}{digits:0>2}")
    } else {
        f.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn objects_print_as_go_maps_with_sorted_keys() {
        let v = json!({"name": "app", "image": "nginx", "ports": [{"containerPort": 80}]});
        assert_eq!(
            value(&v),
            "map[image:nginx name:app ports:[map[containerPort:80]]]"
        );
    }

    #[test]
    fn scalars_print_as_go_prints_them() {
        assert_eq!(value(&json!(null)), "<nil>");
        assert_eq!(value(&json!(true)), "true");
        assert_eq!(value(&json!(-3)), "-3");
        assert_eq!(value(&json!(2.5)), "2.5");
        assert_eq!(value(&json!(1e21)), "1e+21");
        assert_eq!(value(&json!(0.00001)), "1e-05");
        assert_eq!(list(&[json!("a"), json!(1)]), "[a 1]");
    }

    #[test]
    fn type_names_are_gos_reflect_names() {
        assert_eq!(type_name(&json!({})), MAP);
        assert_eq!(type_name(&json!([])), SLICE);
        assert_eq!(type_name(&json!(1)), "int64");
        assert_eq!(type_name(&json!(1.5)), "float64");
        assert_eq!(type_name(&json!(null)), "<nil>");
    }
}
