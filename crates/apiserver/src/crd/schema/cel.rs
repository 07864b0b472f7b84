//! `x-kubernetes-validations`: rules compiled when the schema is parsed (with the part of
//! upstream's type check that matters most, field references on `self`), and evaluated against
//! custom resources as upstream's `cel.Validator`: `self` typed by the schema, `oldSelf` for
//! transition rules where the old value correlates, `message`, `messageExpression`, `reason`
//! and `fieldPath`, and upstream's messages for failures and evaluation errors.
//!
//! The environment is the shared admission one (`crate::admission::expressions`: the standard
//! library with the strings and lists extensions) plus `matches()` on Go regular expressions;
//! upstream's Kubernetes libraries (quantity, IP, URL, …) are not available, and strings with
//! date, date-time or duration formats stay strings. Cost is estimated, not metered: each
//! evaluation costs the size of `self` raised to the rule's comprehension nesting depth.

use std::collections::HashMap;
use std::sync::Arc;

use cel::common::ast::Expr;
use cel::objects::OptionalValue;
use cel::{ExecutionError, IdedExpr, Program};
use serde_json::Value;
use skiff_apimachinery::validation::{FieldError, FieldPath};

use super::{Schema, regex::Regex};
use crate::admission::expressions::{self, MAX_MESSAGE_BYTES, RESERVED_WORDS};

/// Upstream's `PerCallLimit`: the cost one evaluation may reach.
const PER_CALL_LIMIT: u64 = 1_000_000;
/// Upstream's `RuntimeCELCostBudget`: the cost all evaluations of one request may reach.
const RUNTIME_BUDGET: u64 = 10_000_000;

/// One rule's fields as written in the CRD.
#[derive(Debug, Clone, Default)]
pub(super) struct RuleFields {
    pub rule: String,
    pub message: String,
    pub message_expression: String,
    pub reason: Option<String>,
    pub field_path: String,
    pub optional_old_self: Option<bool>,
}

/// A rule with what compiling it gave.
#[derive(Debug, Clone)]
pub(super) struct Rule {
    pub fields: RuleFields,
    /// The rule as written: the value upstream shows with its compile errors.
    pub json: Value,
    /// `Ok(None)`: a blank rule, not compiled. `Err`: upstream's compile error detail.
    program: Result<Option<Arc<Program>>, String>,
    /// The compiled `messageExpression`, if there is one.
    message: Option<Result<Arc<Program>, String>>,
    /// Whether the rule refers to `oldSelf` (a transition rule).
    pub uses_old_self: bool,
    /// How deeply comprehensions nest in the rule, for the cost estimate.
    depth: u32,
    /// `fieldPath` as a field path (`spec.x`), when it is valid for the node.
    field_path: Option<String>,
    /// The fields of `self` and `oldSelf` the rule and its `messageExpression` select, when
    /// they use them only that way (`self.a < self.b`): only those are made CEL values.
    /// `None`: they are used whole.
    selected: Option<Vec<String>>,
}

impl Rule {
    /// Compiles `fields` (from `json`) for the schema node `node` they are declared on
    /// (`resource`: the node is a resource, the root or embedded).
    pub(super) fn parse(json: &Value, fields: RuleFields, node: &Schema, resource: bool) -> Rule {
        let mut uses_old_self = false;
        let mut depth = 0;
        let program = if fields.rule.trim().is_empty() {
            Ok(None)
        } else {
            compile(&fields.rule, "compilation failed: ").and_then(|p| {
                let expr = p.expression();
                if let Some(detail) = undefined_field(expr, &p, node, resource) {
                    return Err(detail);
                }
                if !may_be(expr, Kind::Bool) {
                    return Err("cel expression must evaluate to a bool".into());
                }
                uses_old_self = p.references().has_variable("oldSelf");
                depth = comprehension_depth(expr);
                Ok(Some(Arc::new(p)))
            })
        };
        let message = (!fields.message_expression.is_empty()).then(|| {
            compile(
                &fields.message_expression,
                "messageExpression compilation failed: ",
            )
            .and_then(|p| {
                if may_be(p.expression(), Kind::String) {
                    Ok(Arc::new(p))
                } else {
                    Err("messageExpression must evaluate to a string".into())
                }
            })
        });
        let field_path = Some(fields.field_path.as_str())
            .filter(|p| !p.is_empty())
            .and_then(|p| valid_field_path(p, node));
        let mut selected = Some(Vec::new());
        let programs = [program.as_ref().ok().cloned().flatten()]
            .into_iter()
            .chain([message.as_ref().and_then(|m| m.as_ref().ok().cloned())]);
        for p in programs.flatten() {
            if let Some(fields) = &mut selected
                && !selected_fields(p.expression(), fields)
            {
                selected = None;
            }
        }
        Rule {
            json: json.clone(),
            fields,
            program,
            message,
            uses_old_self,
            depth,
            field_path,
            selected,
        }
    }

    /// The rule's compile error, if it has one.
    pub(super) fn compile_error(&self) -> Option<&str> {
        self.program.as_ref().err().map(String::as_str)
    }

    /// The `messageExpression`'s compile error, if it has one.
    pub(super) fn message_error(&self) -> Option<&str> {
        self.message.as_ref()?.as_ref().err().map(String::as_str)
    }

    /// Upstream's `ruleErrorString`: the message if there is one, else the rule.
    fn error_string(&self) -> &str {
        match self.fields.message.trim() {
            "" => self.fields.rule.trim(),
            message => message,
        }
    }
}

/// Compiles `source`; errors are `prefix` and cel-go's issues (`ERROR: <input>:line:col: …`,
/// the source line and a caret under the column, each indented ` | `).
fn compile(source: &str, prefix: &str) -> Result<Program, String> {
    expressions::compile(source).map_err(|e| {
        let issues = e.strip_prefix("compilation failed: ").unwrap_or(&e);
        let lines: Vec<String> = issues
            .lines()
            .map(|line| match line.strip_prefix('|') {
                Some(snippet) => format!(" |{snippet}"),
                None => line.to_string(),
            })
            .collect();
        format!("{prefix}{}", lines.join("\n"))
    })
}

/// An issue `line` followed by the source line `row` and a caret under column `col`, as
/// cel-go prints issues.
fn with_snippet(line: &str, source: &str, row: usize, col: usize) -> String {
    let text = source
        .lines()
        .nth(row.saturating_sub(1))
        .unwrap_or_default();
    let dots = ".".repeat(col.saturating_sub(1));
    format!("{line}\n | {text}\n | {dots}^")
}

/// A CEL type as far as the static checks here can tell.
#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Bool,
    String,
}

/// Whether `expr` may evaluate to `kind`: false only for literals and operators whose type is
/// evidently another.
fn may_be(expr: &IdedExpr, kind: Kind) -> bool {
    use cel::common::ast::LiteralValue as L;
    match &expr.expr {
        Expr::Literal(L::Boolean(_)) => kind == Kind::Bool,
        Expr::Literal(L::String(_)) => kind == Kind::String,
        Expr::Literal(_) | Expr::List(_) | Expr::Map(_) => false,
        Expr::Call(call) => match call.func_name.as_str() {
            "_==_" | "_!=_" | "_<_" | "_<=_" | "_>_" | "_>=_" | "_&&_" | "_||_" | "!_" | "@in"
            | "has" | "startsWith" | "endsWith" | "contains" | "matches" => kind == Kind::Bool,
            "_-_" | "_*_" | "_/_" | "_%_" | "-_" | "size" | "int" | "uint" | "double" => false,
            _ => true,
        },
        _ => true,
    }
}

/// cel-go's `undefined field` error for the first field selected on `self` or `oldSelf` that
/// the schema does not declare (chains of selections only; comprehension variables and
/// indexing are not followed).
fn undefined_field(
    expr: &IdedExpr,
    program: &Program,
    node: &Schema,
    resource: bool,
) -> Option<String> {
    let mut found = None;
    visit(expr, &mut |e| {
        if found.is_some() {
            return;
        }
        let Expr::Select(select) = &e.expr else {
            return;
        };
        if let Some(parent) = resolve(&select.operand, node, resource)
            && matches!(lookup(parent, &select.field), Selected::Undefined)
        {
            let offset = program
                .source_info()
                .offset_for(e.id)
                .map_or(0, |(start, _)| start as usize);
            let source = &program.source_info().source;
            let before: Vec<char> = source.chars().take(offset).collect();
            let row = before.iter().filter(|c| **c == '\n').count() + 1;
            let col = before.iter().rev().take_while(|c| **c != '\n').count() + 1;
            let line = format!(
                "ERROR: <input>:{row}:{col}: undefined field '{}'",
                select.field
            );
            found = Some(format!(
                "compilation failed: {}",
                with_snippet(&line, source, row, col)
            ));
        }
    });
    found
}

/// What a chain of selections on `self` refers to.
enum Selected<'a> {
    /// A schema node (with whether it is a resource root, whose metadata is restricted).
    Node(&'a Schema, bool),
    /// Root `metadata`: only `name` and `generateName` are visible.
    Metadata,
    /// Something the checks here do not follow (maps, untyped values, scalars).
    Unknown,
    /// A field the schema does not declare.
    Undefined,
}

/// What `expr` refers to if it is `self`, `oldSelf` or a chain of selections on them.
fn resolve<'a>(expr: &IdedExpr, node: &'a Schema, root: bool) -> Option<Selected<'a>> {
    match &expr.expr {
        Expr::Ident(name) if name == "self" || name == "oldSelf" => {
            Some(Selected::Node(node, root))
        }
        Expr::Select(select) if !select.test => {
            Some(lookup(resolve(&select.operand, node, root)?, &select.field))
        }
        _ => None,
    }
}

/// What selecting `field` on `parent` refers to.
fn lookup<'a>(parent: Selected<'a>, field: &str) -> Selected<'a> {
    match parent {
        Selected::Node(schema, root) => declared(schema, root, field),
        Selected::Metadata if field == "name" || field == "generateName" => Selected::Unknown,
        Selected::Metadata => Selected::Undefined,
        Selected::Unknown | Selected::Undefined => Selected::Unknown,
    }
}

/// The field `field` (as CEL spells it) of the object `parent`.
fn declared<'a>(parent: &'a Schema, root: bool, field: &str) -> Selected<'a> {
    let resource = root || parent.x.embedded_resource;
    if parent.type_name != "object"
        || parent.additional_properties.is_some()
        || (parent.preserves_unknown_fields() && parent.properties.is_empty())
    {
        return Selected::Unknown;
    }
    if let Some((_, child)) = parent
        .properties
        .iter()
        .find(|(name, _)| escape(name).as_deref() == Some(field))
    {
        return if resource && field == "metadata" {
            Selected::Metadata
        } else {
            Selected::Node(child, child.x.embedded_resource)
        };
    }
    match field {
        "metadata" if resource => Selected::Metadata,
        "apiVersion" | "kind" if resource => Selected::Unknown,
        _ => Selected::Undefined,
    }
}

/// Calls `f` on `expr` and every expression inside it.
fn visit(expr: &IdedExpr, f: &mut impl FnMut(&IdedExpr)) {
    f(expr);
    for child in children(expr) {
        visit(child, f);
    }
}

/// The expressions directly inside `expr`.
fn children(expr: &IdedExpr) -> Vec<&IdedExpr> {
    match &expr.expr {
        Expr::Call(call) => call
            .target
            .iter()
            .map(|t| t.as_ref())
            .chain(&call.args)
            .collect(),
        Expr::Select(select) => vec![select.operand.as_ref()],
        Expr::List(list) => list.elements.iter().collect(),
        Expr::Map(map) => entries(&map.entries),
        Expr::Struct(st) => entries(&st.entries),
        Expr::Comprehension(c) => vec![
            &c.iter_range,
            &c.accu_init,
            &c.loop_cond,
            &c.loop_step,
            &c.result,
        ],
        _ => Vec::new(),
    }
}

/// The keys and values of map and struct literal entries.
fn entries(entries: &[cel::common::ast::IdedEntryExpr]) -> Vec<&IdedExpr> {
    use cel::common::ast::EntryExpr;
    entries
        .iter()
        .flat_map(|e| match &e.expr {
            EntryExpr::MapEntry(m) => vec![&m.key, &m.value],
            EntryExpr::StructField(f) => vec![&f.value],
        })
        .collect()
}

/// The fields of `self` and `oldSelf` that `rules` (of one node) select, when that is all they
/// use them for; `None` if one uses them whole.
pub(super) fn selected(rules: &[Rule]) -> Option<Vec<String>> {
    let mut fields: Vec<String> = Vec::new();
    for rule in rules {
        for field in rule.selected.as_ref()? {
            if !fields.contains(field) {
                fields.push(field.clone());
            }
        }
    }
    Some(fields)
}

/// Adds to `fields` the fields `expr` selects on `self` and `oldSelf`; false if it uses either
/// otherwise (whole, as in `self == oldSelf`, `size(self)` or `self.?x`).
fn selected_fields(expr: &IdedExpr, fields: &mut Vec<String>) -> bool {
    match &expr.expr {
        Expr::Select(select) if matches!(&select.operand.expr, Expr::Ident(n) if n == "self" || n == "oldSelf") =>
        {
            if !fields.contains(&select.field) {
                fields.push(select.field.clone());
            }
            true
        }
        Expr::Ident(name) if name == "self" || name == "oldSelf" => false,
        _ => children(expr)
            .into_iter()
            .all(|child| selected_fields(child, fields)),
    }
}

/// How deeply comprehensions (`all`, `exists`, `map`, …) nest in `expr`.
fn comprehension_depth(expr: &IdedExpr) -> u32 {
    let deepest = |exprs: Vec<&IdedExpr>| exprs.into_iter().map(comprehension_depth).max();
    match &expr.expr {
        Expr::Comprehension(c) => {
            let body = deepest(vec![&c.loop_cond, &c.loop_step, &c.result]).unwrap_or(0);
            (body + 1).max(comprehension_depth(&c.iter_range))
        }
        _ => deepest(children(expr)).unwrap_or(0),
    }
}

/// Upstream's `cel.Escape`: a property name as CEL spells it, `None` when it cannot be.
pub(super) fn escape(name: &str) -> Option<String> {
    if name.is_empty() || name.starts_with(|c: char| c.is_ascii_digit()) {
        return None;
    }
    if RESERVED_WORDS.contains(&name) {
        return Some(format!("__{name}__"));
    }
    let mut out = String::with_capacity(name.len());
    let mut rest = name;
    while let Some(c) = rest.chars().next() {
        if let Some(after) = rest.strip_prefix("__") {
            out.push_str("__underscores__");
            rest = after;
            continue;
        }
        match c {
            '.' => out.push_str("__dot__"),
            '-' => out.push_str("__dash__"),
            '/' => out.push_str("__slash__"),
            c if c.is_ascii_alphanumeric() || c == '_' => out.push(c),
            _ => return None,
        }
        rest = &rest[c.len_utf8()..];
    }
    Some(out)
}

/// Upstream's `ValidFieldPath`: a JSON path of `.name` and `['name']` steps through the
/// node's properties and map values, as the field path it names (`spec.x`, `labels[app]`).
pub(super) fn valid_field_path(json_path: &str, node: &Schema) -> Option<String> {
    let mut path = FieldPath::default();
    let mut schema = node;
    let mut rest = json_path;
    while !rest.is_empty() {
        let name = if let Some(after) = rest.strip_prefix('.') {
            let end = after.find(['.', '[']).unwrap_or(after.len());
            rest = &after[end..];
            after[..end].to_string()
        } else if let Some(after) = rest.strip_prefix("['") {
            let end = quoted_end(after)?;
            rest = after[end + 1..].strip_prefix(']')?;
            unescape_single_quoted(&after[..end])?
        } else {
            return None;
        };
        if !schema.properties.is_empty() {
            schema = schema.properties.get(&name)?;
            path = path.child(name);
        } else {
            schema = schema.additional_schema()??;
            path = path.key(name);
        }
    }
    Some(path.to_string())
}

/// The index of the closing `'` of a single-quoted string (`after` starts inside it).
fn quoted_end(after: &str) -> Option<usize> {
    let bytes = after.as_bytes();
    (0..bytes.len()).find(|&i| bytes[i] == b'\'' && (i == 0 || bytes[i - 1] != b'\\'))
}

fn unescape_single_quoted(s: &str) -> Option<String> {
    let mut out = String::new();
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        out.push(match chars.next()? {
            'a' => '\x07',
            'b' => '\x08',
            'f' => '\x0c',
            'n' => '\n',
            'r' => '\r',
            't' => '\t',
            'v' => '\x0b',
            '\'' => '\'',
            '\\' => '\\',
            _ => return None,
        });
    }
    Some(out)
}

/// Evaluates every rule of `schema` against `obj` (`old`: the stored object on update), with
/// error paths under `base` (`None`: upstream's nil path, rendered `<nil>` at the root);
/// `resource_root`: `obj` is a resource, whose `metadata` rules see only names of.
pub(super) fn validate(
    schema: &Schema,
    obj: &Value,
    old: Option<&Value>,
    base: Option<&FieldPath>,
    resource_root: bool,
) -> Vec<FieldError> {
    let mut run = Run {
        budget: RUNTIME_BUDGET,
        errs: Vec::new(),
    };
    // An `Err` means evaluation stopped early; the errors say why.
    let _ = run.node(schema, obj, old, base.cloned(), resource_root);
    run.errs
}

/// One request's evaluation: the remaining budget and the errors so far.
struct Run {
    budget: u64,
    errs: Vec<FieldError>,
}

/// `Err(())`: evaluation stops (the budget or a call's limit was exceeded).
type Flow = Result<(), ()>;

impl Run {
    fn node(
        &mut self,
        s: &Schema,
        obj: &Value,
        old: Option<&Value>,
        path: Option<FieldPath>,
        resource_root: bool,
    ) -> Flow {
        if obj.is_null() || !s.has_rules {
            return Ok(());
        }
        let old = old.filter(|o| !o.is_null());
        self.rules(s, obj, old, &path, resource_root)?;
        match obj {
            Value::Array(items) => {
                let Some(item_schema) = s.items.as_deref() else {
                    return Ok(());
                };
                let old_items = old.and_then(Value::as_array);
                for (i, item) in items.iter().enumerate() {
                    // Only map lists correlate items with the old list, by their keys.
                    let old_item = old_items
                        .filter(|_| s.x.list_type.as_deref() == Some("map"))
                        .and_then(|olds| {
                            olds.iter().find(|o| same_keys(&s.x.list_map_keys, o, item))
                        });
                    let child = path.clone().unwrap_or_default().index(i);
                    self.node(
                        item_schema,
                        item,
                        old_item,
                        Some(child),
                        item_schema.x.embedded_resource,
                    )?;
                }
            }
            Value::Object(fields) => {
                let old_fields = old.and_then(Value::as_object);
                if let Some(values) = s.additional_schema().flatten() {
                    for (k, v) in fields {
                        let child = path.clone().unwrap_or_default().key(k);
                        let old_v = old_fields.and_then(|o| o.get(k));
                        self.node(values, v, old_v, Some(child), values.x.embedded_resource)?;
                    }
                }
                for (k, v) in fields {
                    if let Some(prop) = s.properties.get(k) {
                        let child = path.clone().unwrap_or_default().child(k);
                        let old_v = old_fields.and_then(|o| o.get(k));
                        self.node(prop, v, old_v, Some(child), prop.x.embedded_resource)?;
                    }
                }
            }
            _ => {}
        }
        Ok(())
    }

    fn rules(
        &mut self,
        s: &Schema,
        obj: &Value,
        old: Option<&Value>,
        path: &Option<FieldPath>,
        resource_root: bool,
    ) -> Flow {
        if s.x.rules.is_empty() {
            return Ok(());
        }
        let here = path.clone().unwrap_or_else(|| FieldPath::new("<nil>"));
        let type_value = Value::from(s.type_name.as_str());
        if self.budget == 0 {
            return self.out_of_budget(&here, &type_value, "validation failed");
        }
        let only = s.rule_fields.as_deref();
        let this = to_cel_only(obj, s, resource_root, only);
        let old_value = old.map(|o| to_cel_only(o, s, resource_root, only));
        let size = nodes(obj);
        for rule in &s.x.rules {
            let program = match &rule.program {
                Ok(Some(program)) => program,
                Ok(None) => continue,
                Err(detail) => {
                    let detail = format!("rule compile error: {detail}");
                    self.errs
                        .push(FieldError::invalid(&here, type_value.clone(), detail));
                    continue;
                }
            };
            let optional = rule.fields.optional_old_self == Some(true);
            if rule.uses_old_self && old.is_none() && !optional {
                continue; // transition rules need an old value
            }
            let mut variables = vec![("self", this.clone())];
            if optional {
                let wrapped = match &old_value {
                    Some(v) => OptionalValue::of(v.clone()),
                    None => OptionalValue::none(),
                };
                variables.push(("oldSelf", cel::Value::Opaque(Arc::new(wrapped))));
            } else if let Some(v) = &old_value {
                variables.push(("oldSelf", v.clone()));
            }
            let context = context(variables);
            let cost = size.saturating_pow(rule.depth);
            if cost > PER_CALL_LIMIT {
                let detail = format!(
                    "'operation cancelled: actual cost limit exceeded': no further validation rules will be run due to call cost exceeds limit for rule: {}",
                    rule.error_string()
                );
                self.errs
                    .push(FieldError::invalid(&here, type_value, detail));
                return Err(());
            }
            if cost > self.budget {
                return self.out_of_budget(&here, &type_value, "validation failed");
            }
            self.budget -= cost;
            let result = match expressions::evaluate(program, &context) {
                Ok(v) => v,
                Err(e) => {
                    let e = go_error(&e);
                    let detail = if e.starts_with("no such overload") {
                        format!(
                            "'{e}': call arguments did not match a supported operator, function or macro signature for rule: {}",
                            rule.error_string()
                        )
                    } else {
                        format!("{e} evaluating rule: {}", rule.error_string())
                    };
                    self.errs
                        .push(FieldError::invalid(&here, type_value.clone(), detail));
                    continue;
                }
            };
            if result == cel::Value::Bool(true) {
                continue;
            }
            let at = match &rule.field_path {
                Some(fp) => path.clone().unwrap_or_default().child(fp.as_str()),
                None => here.clone(),
            };
            let detail = match self.message(rule, &context, size, &at, &type_value)? {
                Some(message) => message,
                None if rule.fields.message.is_empty() => {
                    format!("failed rule: {}", rule.error_string())
                }
                None => rule.fields.message.trim().to_string(),
            };
            // Upstream shows the schema type as the value (`Invalid value: "object"`).
            let reason = rule.fields.reason.as_deref();
            self.errs.push(failure(&at, &type_value, detail, reason));
        }
        Ok(())
    }

    /// The evaluated `messageExpression`, `None` when there is none or it gives no usable
    /// message (upstream then falls back to `message`).
    fn message(
        &mut self,
        rule: &Rule,
        context: &cel::Context<'_, '_>,
        size: u64,
        at: &FieldPath,
        type_value: &Value,
    ) -> Result<Option<String>, ()> {
        let Some(Ok(program)) = &rule.message else {
            return Ok(None);
        };
        let cost = size.saturating_pow(comprehension_depth(program.expression()));
        if cost > self.budget {
            self.out_of_budget(at, type_value, "messageExpression evaluation failed")?;
        }
        self.budget -= cost;
        Ok(match expressions::evaluate(program, context) {
            Ok(cel::Value::String(s)) => {
                let s = s.trim();
                (!s.is_empty() && s.len() <= MAX_MESSAGE_BYTES && !s.contains('\n'))
                    .then(|| s.to_string())
            }
            _ => None,
        })
    }

    fn out_of_budget(&mut self, at: &FieldPath, type_value: &Value, what: &str) -> Flow {
        self.budget = 0;
        let detail = format!(
            "{what} due to running out of cost budget, no further validation rules will be run"
        );
        self.errs
            .push(FieldError::invalid(at, type_value.clone(), detail));
        Err(())
    }
}

/// The error for a rule that evaluated to false, by its `reason` (upstream's
/// `fieldErrorForReason`), with the schema type as the value.
fn failure(at: &FieldPath, type_value: &Value, detail: String, reason: Option<&str>) -> FieldError {
    match reason {
        Some("FieldValueForbidden") => FieldError::forbidden(at, detail),
        Some("FieldValueRequired") => FieldError::required(at, detail),
        Some("FieldValueDuplicate") => FieldError::duplicate(at, type_value.clone()),
        _ => FieldError::invalid(at, type_value.clone(), detail),
    }
}

/// Whether two map-list items have the same values for the list's keys.
fn same_keys(keys: &[String], a: &Value, b: &Value) -> bool {
    keys.iter().all(|k| a.get(k) == b.get(k))
}

/// The number of JSON values in `v`, the size the cost estimate works from.
fn nodes(v: &Value) -> u64 {
    1 + match v {
        Value::Array(items) => items.iter().map(nodes).sum(),
        Value::Object(fields) => fields.values().map(nodes).sum(),
        _ => 0,
    }
}

/// An evaluation context holding `variables` and `matches()`.
fn context(variables: Vec<(&str, cel::Value)>) -> cel::Context<'static, 'static> {
    let mut context = expressions::context(variables);
    // `matches` is not declared by the shared environment (no regex feature), so it can be
    // added to the context; the name is known to be free.
    let _ = context.add_function("matches", matches);
    context
}

fn matches(
    cel::extractors::This(text): cel::extractors::This<Arc<String>>,
    pattern: Arc<String>,
) -> Result<bool, ExecutionError> {
    let re = Regex::new(&pattern).map_err(|e| ExecutionError::function_error("matches", e))?;
    Ok(re.is_match(&text))
}

/// An evaluation error of the `cel` crate as cel-go words it.
fn go_error(e: &str) -> String {
    if let Some(key) = e.strip_prefix("No such key: ") {
        return format!("no such key: {key}");
    }
    let fixed = [
        ("Division by zero", "division by zero"),
        ("Remainder by zero", "modulus by zero"),
        ("Overflow", "integer overflow"),
        ("found no matching overload", "no such overload"),
        ("Unsupported binary operator", "no such overload"),
        ("Index out of bounds", "index out of bounds"),
    ];
    fixed
        .iter()
        .find(|(prefix, _)| e.starts_with(prefix))
        .map_or_else(|| e.to_string(), |(_, go)| go.to_string())
}

/// `value` as CEL sees it under `schema` (upstream's `UnstructuredToVal`): integers are `int`,
/// numbers `double`, `byte` strings bytes, objects with properties expose their declared
/// properties by escaped name, resource roots expose `apiVersion`, `kind` and only
/// `metadata.name` and `metadata.generateName`; untyped values are converted as JSON.
fn to_cel(value: &Value, schema: Option<&Schema>, resource_root: bool) -> cel::Value {
    match schema {
        Some(s) => to_cel_only(value, s, resource_root, None),
        None => expressions::value(value),
    }
}

/// [`to_cel`], with only the fields `only` names (by their CEL names) when `value` is an object.
fn to_cel_only(
    value: &Value,
    s: &Schema,
    resource_root: bool,
    only: Option<&[String]>,
) -> cel::Value {
    let wanted = |name: &str| only.is_none_or(|o| o.iter().any(|f| f == name));
    match (s.type_name.as_str(), value) {
        (_, Value::Null) => cel::Value::Null,
        ("integer", Value::Number(n)) => {
            let integral = n.as_f64().filter(|f| f.fract() == 0.0).map(|f| f as i64);
            match n.as_i64().or(integral) {
                Some(i) => cel::Value::Int(i),
                None => expressions::value(value),
            }
        }
        ("number", Value::Number(n)) => cel::Value::Float(n.as_f64().unwrap_or(f64::NAN)),
        ("string", Value::String(text)) if s.format == "byte" => {
            use base64::Engine as _;
            match base64::engine::general_purpose::STANDARD.decode(text) {
                Ok(bytes) => cel::Value::Bytes(Arc::new(bytes)),
                Err(_) => expressions::value(value),
            }
        }
        ("array", Value::Array(items)) => cel::Value::List(Arc::new(
            items
                .iter()
                .map(|v| to_cel(v, s.items.as_deref(), false))
                .collect(),
        )),
        ("object", Value::Object(fields)) => {
            let resource = resource_root || s.x.embedded_resource;
            let mut out: HashMap<String, cel::Value> = HashMap::new();
            if let Some(Some(values)) = s.additional_schema().filter(|_| s.properties.is_empty()) {
                for (k, v) in fields.iter().filter(|(k, _)| wanted(k)) {
                    out.insert(
                        k.clone(),
                        to_cel(v, Some(values), values.x.embedded_resource),
                    );
                }
            } else if s.properties.is_empty() && !resource && s.preserves_unknown_fields() {
                return expressions::value(value);
            }
            for (k, v) in fields {
                if resource && (k == "metadata" || k == "apiVersion" || k == "kind") && !wanted(k) {
                    continue;
                }
                if resource && k == "metadata" {
                    let visible: serde_json::Map<String, Value> = v
                        .as_object()
                        .into_iter()
                        .flatten()
                        .filter(|(k, _)| *k == "name" || *k == "generateName")
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect();
                    out.insert(k.clone(), expressions::value(&Value::Object(visible)));
                } else if resource && (k == "apiVersion" || k == "kind") {
                    out.insert(k.clone(), expressions::value(v));
                } else if let (Some(prop), Some(name)) = (s.properties.get(k), escape(k))
                    && wanted(&name)
                {
                    out.insert(name, to_cel(v, Some(prop), prop.x.embedded_resource));
                }
            }
            cel::Value::from(out)
        }
        _ => expressions::value(value),
    }
}
