//! Unit tests of label selectors: upstream's parse, match, error and canonical-string tables,
//! `metav1.LabelSelector` conversion, and round-trip properties over generated selectors.

use super::*;
use serde_json::json;
use std::collections::BTreeSet;

fn set(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn req(key: &str, op: Operator, values: &[&str]) -> Requirement {
    Requirement::new(key, op, values.iter().map(|v| v.to_string()).collect()).unwrap()
}

fn err(selector: &str) -> String {
    Selector::parse(selector).unwrap_err().to_string()
}

#[test]
fn good_strings_parse_and_print_back_without_spaces() {
    let good = [
        "x=a,y=b,z=c",
        "",
        "x!=a,y=b",
        "x=",
        "x= ",
        "x=,z= ",
        "x= ,z= ",
        "!x",
        "x>1",
        "x>1,z<5",
    ];
    for s in good {
        let sel = Selector::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"));
        assert_eq!(sel.to_string(), s.replace(' ', ""), "{s}");
    }
}

#[test]
fn bad_strings_are_rejected() {
    for s in [
        "x=a||y=b",
        "x==a==b",
        "!x=a",
        "x<a",
        "x,,y",
        ",x,y",
        "x nott in (y)",
        "a in (xyz),",
        "a in (xyz)b notin ()",
        "a in (xyz abc)",
        "a notin(",
        "a (",
        "(",
    ] {
        assert!(Selector::parse(s).is_err(), "{s} should not parse");
    }
}

#[test]
fn parsing_sorts_requirements_by_key_deterministically() {
    let a = Selector::parse("x=a,a=x").unwrap();
    let b = Selector::parse("a=x,x=a").unwrap();
    assert_eq!(a, b);
    assert_eq!(a.to_string(), "a=x,x=a");
}

#[test]
fn set_based_strings_parse_into_upstreams_requirements() {
    use Operator::*;
    let cases: Vec<(&str, Vec<Requirement>)> = vec![
        ("", vec![]),
        ("\rx", vec![req("x", Exists, &[])]),
        (
            "this-is-a-dns.domain.com/key-with-dash",
            vec![req("this-is-a-dns.domain.com/key-with-dash", Exists, &[])],
        ),
        (
            "this-is-another-dns.domain.com/key-with-dash in (so,what)",
            vec![req(
                "this-is-another-dns.domain.com/key-with-dash",
                In,
                &["so", "what"],
            )],
        ),
        (
            "0.1.2.domain/99 notin (10.10.100.1, tick.tack.clock)",
            vec![req(
                "0.1.2.domain/99",
                NotIn,
                &["10.10.100.1", "tick.tack.clock"],
            )],
        ),
        ("foo  in\t (abc)", vec![req("foo", In, &["abc"])]),
        ("x notin\n (abc)", vec![req("x", NotIn, &["abc"])]),
        (
            "x  notin\t\t\t(abc,def)",
            vec![req("x", NotIn, &["abc", "def"])],
        ),
        ("x in (abc,def)", vec![req("x", In, &["abc", "def"])]),
        ("x in (abc,)", vec![req("x", In, &["", "abc"])]),
        ("x in ()", vec![req("x", In, &[""])]),
        (
            "x notin (abc,,def),bar,z in (),w",
            vec![
                req("bar", Exists, &[]),
                req("w", Exists, &[]),
                req("x", NotIn, &["", "abc", "def"]),
                req("z", In, &[""]),
            ],
        ),
        (
            "x,y in (a)",
            vec![req("x", Exists, &[]), req("y", In, &["a"])],
        ),
        ("x=a", vec![req("x", Equals, &["a"])]),
        ("x==a", vec![req("x", DoubleEquals, &["a"])]),
        ("x>1", vec![req("x", GreaterThan, &["1"])]),
        ("x<7", vec![req("x", LessThan, &["7"])]),
        (
            "x=a,y!=b,z in (h,i,j)",
            vec![
                req("x", Equals, &["a"]),
                req("y", NotEquals, &["b"]),
                req("z", In, &["h", "i", "j"]),
            ],
        ),
        ("x notin ( )", vec![req("x", NotIn, &[""])]),
        ("x notin (, a)", vec![req("x", NotIn, &["", "a"])]),
        ("a ", vec![req("a", Exists, &[])]),
        (
            "a in (x,y,notin, z,in)",
            vec![req("a", In, &["in", "notin", "x", "y", "z"])],
        ),
        ("notin=in", vec![req("notin", Equals, &["in"])]),
        ("in in (in)", vec![req("in", In, &["in"])]),
        ("!in", vec![req("in", DoesNotExist, &[])]),
    ];
    for (input, want) in cases {
        let got = Selector::parse(input).unwrap_or_else(|e| panic!("{input:?}: {e}"));
        assert_eq!(got.requirements(), want.as_slice(), "{input:?}");
    }
}

#[test]
fn parse_errors_read_as_upstreams() {
    let key_msg = "a qualified name must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')";
    let value_msg = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";
    let cases = [
        ("x=a||y=b", "unable to parse requirement: values[0][x]: Invalid value: \"a||y\": ".to_string() + value_msg),
        ("x==a==b", "found '==', expected: ',' or 'end of string'".to_string()),
        ("!x=a", "found '=', expected: ',' or 'end of string'".to_string()),
        ("x<a", "unable to parse requirement: values[0]: Invalid value: \"a\": for 'Gt', 'Lt' operators, the value must be an integer".to_string()),
        ("x,,y", "found ',', expected: identifier after ','".to_string()),
        (",x", "found ',', expected: !, identifier, or 'end of string'".to_string()),
        ("x nott in (y)", "unable to parse requirement: found 'nott', expected: in, notin, =, ==, !=, gt, lt".to_string()),
        ("a in (xyz),", "found '', expected: identifier after ','".to_string()),
        ("a in (xyz)b notin ()", "found 'b', expected: ',' or 'end of string'".to_string()),
        ("a in (xyz abc)", "unable to parse requirement: found 'abc', expected: ',' or ')'".to_string()),
        ("a notin(", "unable to parse requirement: found '', expected: ',', ')' or identifier".to_string()),
        ("a notin", "unable to parse requirement: found '' expected: '('".to_string()),
        ("a in (,", "unable to parse requirement: found '', expected: ',', or identifier".to_string()),
        ("a (", "unable to parse requirement: found '(', expected: in, notin, =, ==, !=, gt, lt".to_string()),
        ("(", "found '(', expected: !, identifier, or 'end of string'".to_string()),
        ("!", "unable to parse requirement: found '', expected: identifier".to_string()),
        ("a=(b)", "unable to parse requirement: found '(', expected: identifier".to_string()),
        ("a/b/c=d", format!("unable to parse requirement: <nil>: Invalid value: \"a/b/c\": {key_msg}")),
        ("x in (a b,c)", "unable to parse requirement: found 'b', expected: ',' or ')'".to_string()),
        ("x in (-a,b_)", format!("unable to parse requirement: [values[0][x]: Invalid value: \"-a\": {value_msg}, values[1][x]: Invalid value: \"b_\": {value_msg}]")),
    ];
    for (input, want) in cases {
        assert_eq!(err(input), want, "{input:?}");
    }
}

#[test]
fn a_nul_byte_reads_like_the_end_of_input_as_upstream() {
    assert_eq!(
        err("a\0b"),
        "unable to parse requirement: found 'b', expected: in, notin, =, ==, !=, gt, lt"
    );
    assert_eq!(
        Selector::parse("a=b,\0").unwrap_err().to_string(),
        "found '', expected: identifier after ','"
    );
}

#[test]
fn requirement_constructor_enforces_upstreams_rules() {
    use Operator::*;
    let cases: Vec<(String, Operator, Vec<&str>, bool)> = vec![
        ("x".into(), In, vec![], false),
        ("x".into(), NotIn, vec![], false),
        ("x".into(), In, vec!["foo"], true),
        ("x".into(), NotIn, vec!["foo"], true),
        ("x".into(), Exists, vec![], true),
        ("x".into(), DoesNotExist, vec![], true),
        ("1foo".into(), In, vec!["bar"], true),
        ("1234".into(), In, vec!["bar"], true),
        ("y".into(), GreaterThan, vec!["1"], true),
        ("z".into(), LessThan, vec!["6"], true),
        ("foo".into(), GreaterThan, vec!["bar"], false),
        ("barz".into(), LessThan, vec!["blah"], false),
        ("a".repeat(254), Exists, vec![], false),
        ("x".into(), Equals, vec!["a", "b"], false),
        ("x".into(), Exists, vec!["a"], false),
        ("x".into(), GreaterThan, vec!["1", "2"], false),
    ];
    for (key, op, values, ok) in cases {
        let result = Requirement::new(
            key.as_str(),
            op,
            values.iter().map(|v| v.to_string()).collect(),
        );
        assert_eq!(result.is_ok(), ok, "{key} {op:?} {values:?}: {result:?}");
    }
    let e = Requirement::new("x", In, vec![]).unwrap_err();
    assert_eq!(
        e.to_string(),
        "values: Invalid value: null: for 'in', 'notin' operators, values set can't be empty"
    );
    let e = Requirement::new("x", Exists, vec!["a".into()]).unwrap_err();
    assert_eq!(
        e.to_string(),
        "values: Invalid value: [\"a\"]: values set must be empty for exists and does not exist"
    );
    let e = Requirement::new("x", Equals, vec!["a".into(), "b".into()]).unwrap_err();
    assert_eq!(
        e.to_string(),
        "values: Invalid value: [\"a\",\"b\"]: exact-match compatibility requires one single value"
    );
}

#[test]
fn canonical_strings_match_upstreams() {
    use Operator::*;
    let cases = [
        (
            vec![
                req("x", In, &["abc", "def"]),
                req("y", NotIn, &["jkl"]),
                req("z", Exists, &[]),
            ],
            "x in (abc,def),y notin (jkl),z",
        ),
        (
            vec![
                req("x", NotIn, &["abc", "def"]),
                req("y", NotEquals, &["jkl"]),
                req("z", DoesNotExist, &[]),
            ],
            "x notin (abc,def),y!=jkl,!z",
        ),
        (
            vec![
                req("x", NotIn, &["abc"]),
                req("y", In, &["jkl", "mno"]),
                req("z", NotIn, &[""]),
            ],
            "x notin (abc),y in (jkl,mno),z notin ()",
        ),
        (
            vec![
                req("x", Equals, &["abc"]),
                req("y", DoubleEquals, &["jkl"]),
                req("z", NotEquals, &["a"]),
                req("z", Exists, &[]),
            ],
            "x=abc,y==jkl,z!=a,z",
        ),
        (
            vec![
                req("x", GreaterThan, &["2"]),
                req("y", LessThan, &["8"]),
                req("z", Exists, &[]),
            ],
            "x>2,y<8,z",
        ),
        (
            vec![req("x", In, &["def", "abc", "abc"])],
            "x in (abc,abc,def)",
        ),
    ];
    for (reqs, want) in cases {
        assert_eq!(Selector::from_requirements(reqs).to_string(), want);
    }
}

#[test]
fn selectors_match_label_sets_as_upstream() {
    let yes = [
        ("", set(&[("x", "y")])),
        ("x=y", set(&[("x", "y")])),
        ("x=y,z=w", set(&[("x", "y"), ("z", "w")])),
        ("x!=y,z!=w", set(&[("x", "z"), ("z", "a")])),
        ("notin=in", set(&[("notin", "in")])),
        ("x", set(&[("x", "z")])),
        ("!x", set(&[("y", "z")])),
        ("x>1", set(&[("x", "2")])),
        ("x<1", set(&[("x", "0")])),
        ("x<1", set(&[("x", "-5")])),
        ("x notin (a)", set(&[])),
        ("x in (a,b)", set(&[("x", "b")])),
        ("foo=bar,baz=blah", set(&[("foo", "bar"), ("baz", "blah")])),
    ];
    for (s, labels) in yes {
        assert!(
            Selector::parse(s).unwrap().matches(&labels),
            "{s} should match {labels:?}"
        );
    }
    let no = [
        ("x=z", set(&[])),
        ("x=y", set(&[("x", "z")])),
        ("x=y,z=w", set(&[("x", "w"), ("z", "w")])),
        ("x!=y,z!=w", set(&[("x", "z"), ("z", "w")])),
        ("x", set(&[("y", "z")])),
        ("!x", set(&[("x", "z")])),
        ("x>1", set(&[("x", "0")])),
        ("x<1", set(&[("x", "2")])),
        ("x>1", set(&[("x", "v2")])),
        ("x>1", set(&[])),
        ("x in ()", set(&[("y", "baz")])),
        (
            "foo=bar,foobar=bar,baz=blah",
            set(&[("foo", "bar"), ("baz", "blah")]),
        ),
    ];
    for (s, labels) in no {
        assert!(
            !Selector::parse(s).unwrap().matches(&labels),
            "{s} should not match {labels:?}"
        );
    }
}

#[test]
fn every_label_container_can_be_matched() {
    let sel = Selector::parse("app=web,tier").unwrap();
    let hash: HashMap<String, String> = [("app", "web"), ("tier", "x")]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    assert!(sel.matches(&hash));
    let value = json!({"app": "web", "tier": ""});
    assert!(sel.matches(&value));
    assert!(sel.matches(value.as_object().unwrap()));
    assert!(
        !sel.matches(&json!({"app": "web", "tier": 1})),
        "a non-string value counts as absent"
    );
    assert!(!sel.matches(&Value::Null));
    let dynamic: &dyn Labels = &hash;
    assert!(sel.matches(dynamic));
}

#[test]
fn everything_is_empty_and_nothing_matches_nothing() {
    assert!(Selector::everything().is_empty());
    assert!(Selector::everything().matches(&set(&[("x", "y")])));
    assert!(!Selector::nothing().is_empty());
    assert!(!Selector::nothing().matches(&set(&[])));
    assert_eq!(Selector::nothing().to_string(), "");
    assert!(
        Selector::nothing()
            .with_requirement(req("a", Operator::Exists, &[]))
            .is_nothing()
    );
}

#[test]
fn label_selector_objects_convert_as_upstream() {
    assert!(
        Selector::from_label_selector(&Value::Null)
            .unwrap()
            .is_nothing()
    );
    assert!(
        Selector::from_label_selector(&json!({}))
            .unwrap()
            .is_empty()
    );
    assert!(
        Selector::from_label_selector(&json!({"matchLabels": {}, "matchExpressions": []}))
            .unwrap()
            .is_empty()
    );
    let sel = Selector::from_label_selector(&json!({
        "matchLabels": {"app": "web", "tier": "front"},
        "matchExpressions": [
            {"key": "env", "operator": "In", "values": ["prod", "dev"]},
            {"key": "track", "operator": "NotIn", "values": ["canary"]},
            {"key": "team", "operator": "Exists"},
            {"key": "legacy", "operator": "DoesNotExist", "values": null},
        ],
    }))
    .unwrap();
    assert_eq!(
        sel.to_string(),
        "app=web,env in (dev,prod),!legacy,team,tier=front,track notin (canary)"
    );
    let labels = set(&[
        ("app", "web"),
        ("tier", "front"),
        ("env", "dev"),
        ("team", "a"),
    ]);
    assert!(sel.matches(&labels));
    assert!(!sel.matches(&set(&[
        ("app", "web"),
        ("tier", "front"),
        ("env", "qa"),
        ("team", "a")
    ])));
}

#[test]
fn label_selector_objects_report_upstreams_errors() {
    let cases = [
        (
            json!({"matchExpressions": [{"key": "a", "operator": "Near"}]}),
            "\"Near\" is not a valid pod selector operator",
        ),
        (
            json!({"matchExpressions": [{"key": "a"}]}),
            "\"\" is not a valid pod selector operator",
        ),
        (
            json!({"matchExpressions": [{"key": "a", "operator": "In"}]}),
            "values: Invalid value: null: for 'in', 'notin' operators, values set can't be empty",
        ),
        (
            json!({"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]}),
            "values: Invalid value: [\"x\"]: values set must be empty for exists and does not exist",
        ),
        (
            json!({"matchLabels": {"app": "b c"}}),
            "values[0][app]: Invalid value: \"b c\": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')",
        ),
        (
            json!({"matchLabels": {"a b": "c"}}),
            "key: Invalid value: \"a b\": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')",
        ),
        (
            json!({"matchLabels": {"app": 1}}),
            "invalid label selector: selector.matchLabels[app] must be a string",
        ),
        (
            json!({"matchExpressions": {}}),
            "invalid label selector: selector.matchExpressions must be an array",
        ),
        (
            json!("app=web"),
            "invalid label selector: selector must be an object",
        ),
    ];
    for (input, want) in cases {
        assert_eq!(
            Selector::from_label_selector(&input)
                .unwrap_err()
                .to_string(),
            want,
            "{input}"
        );
    }
}

#[test]
fn exact_matches_are_found_only_for_single_valued_equality() {
    let cases = [
        ("key in (value)", "key", Some("value")),
        ("key in (value,value2)", "key", None),
        (
            "key in (value,value1),key2 in (value2)",
            "key2",
            Some("value2"),
        ),
        ("key=value", "key", Some("value")),
        ("key==value", "key", Some("value")),
        ("key!=value", "key", None),
        ("key in (value),key2 in (value2)", "key", Some("value")),
        ("other=x", "key", None),
    ];
    for (s, key, want) in cases {
        assert_eq!(
            Selector::parse(s).unwrap().requires_exact_match(key),
            want,
            "{s}"
        );
    }
}

#[test]
fn sets_and_added_requirements_stay_sorted_by_key() {
    let sel = Selector::from_set([("b", "2"), ("a", "1")]);
    assert_eq!(sel.to_string(), "a=1,b=2");
    assert!(Selector::from_set(Vec::<(String, String)>::new()).is_empty());
    let sel = Selector::everything()
        .with_requirement(req("key2", Operator::Equals, &["value2"]))
        .with_requirement(req("key", Operator::In, &["value"]));
    assert_eq!(sel.to_string(), "key in (value),key2=value2");
}

/// A tiny deterministic generator (xorshift64*), so the property tests need no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len())]
    }
}

const KEYS: &[&str] = &[
    "a",
    "app",
    "in",
    "notin",
    "x.y",
    "k8s.io/name",
    "example.com/tier",
    "A_b-c",
    "1",
];
const VALUES: &[&str] = &["", "a", "web", "in", "notin", "1", "42", "A.b_c-d", "x1"];
const INTS: &[&str] = &["0", "1", "7", "42", "100"];

fn random_requirement(rng: &mut Rng) -> Requirement {
    use Operator::*;
    let key = rng.pick(KEYS);
    let ops = [
        In,
        NotIn,
        Equals,
        DoubleEquals,
        NotEquals,
        Exists,
        DoesNotExist,
        GreaterThan,
        LessThan,
    ];
    let op = ops[rng.below(ops.len())];
    let values: Vec<String> = match op {
        In | NotIn => {
            let n = 1 + rng.below(3);
            let set: BTreeSet<String> = (0..n).map(|_| rng.pick(VALUES).to_string()).collect();
            set.into_iter().collect()
        }
        Equals | DoubleEquals | NotEquals => vec![rng.pick(VALUES).to_string()],
        GreaterThan | LessThan => vec![rng.pick(INTS).to_string()],
        Exists | DoesNotExist => vec![],
    };
    Requirement::new(key, op, values).unwrap()
}

fn random_labels(rng: &mut Rng) -> BTreeMap<String, String> {
    (0..rng.below(5))
        .map(|_| (rng.pick(KEYS).to_string(), rng.pick(VALUES).to_string()))
        .collect()
}

#[test]
fn parsing_the_canonical_string_gives_back_the_same_selector() {
    let mut rng = Rng(0x5eed_1234_abcd_0001);
    for _ in 0..2000 {
        let n = rng.below(5);
        let sel =
            Selector::from_requirements((0..n).map(|_| random_requirement(&mut rng)).collect());
        let text = sel.to_string();
        let reparsed = Selector::parse(&text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
        assert_eq!(reparsed, sel, "{text:?}");
        assert_eq!(reparsed.to_string(), text);
    }
}

#[test]
fn label_selector_objects_and_their_strings_select_the_same_labels() {
    let mut rng = Rng(0x5eed_1234_abcd_0002);
    for _ in 0..500 {
        let labels: serde_json::Map<String, Value> = (0..rng.below(3))
            .map(|_| (rng.pick(KEYS).to_string(), Value::from(rng.pick(VALUES))))
            .collect();
        let ops = ["In", "NotIn", "Exists", "DoesNotExist"];
        let exprs: Vec<Value> = (0..rng.below(3))
            .map(|_| {
                let op = ops[rng.below(4)];
                let values: Vec<&str> = if op.ends_with("In") {
                    (0..1 + rng.below(3)).map(|_| rng.pick(VALUES)).collect()
                } else {
                    vec![]
                };
                json!({"key": rng.pick(KEYS), "operator": op, "values": values})
            })
            .collect();
        let object = json!({"matchLabels": labels, "matchExpressions": exprs});
        let from_object = Selector::from_label_selector(&object).unwrap();
        let from_string = Selector::parse(&from_object.to_string()).unwrap();
        for _ in 0..20 {
            let candidate = random_labels(&mut rng);
            assert_eq!(
                from_object.matches(&candidate),
                from_string.matches(&candidate),
                "{object} vs {from_string} on {candidate:?}"
            );
        }
    }
}

#[test]
fn arbitrary_input_never_panics_and_accepted_input_round_trips() {
    let mut rng = Rng(0x5eed_1234_abcd_0003);
    let pieces = [
        "a", "b", "in", "notin", " ", "=", "==", "!=", "!", "(", ")", ",", ">", "<", "1", "x/y",
        "\t", "\0", "é", "-",
    ];
    for _ in 0..5000 {
        let input: String = (0..rng.below(10)).map(|_| rng.pick(&pieces)).collect();
        if let Ok(sel) = Selector::parse(&input) {
            let text = sel.to_string();
            let again =
                Selector::parse(&text).unwrap_or_else(|e| panic!("{input:?} -> {text:?}: {e}"));
            assert_eq!(again.to_string(), text, "{input:?}");
        }
    }
}
