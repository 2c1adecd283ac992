//! `${{ }}` expressions in CEL, compiled once when a workflow is loaded.
//!
//! A string that is exactly one expression takes the expression's value, of
//! any JSON type: `"${{ steps.fetch.output }}"` is an object if the output is.
//! A string that mixes text and expressions is a string; strings are inserted
//! as they are and other values as JSON text.
//!
//! Expressions see three variables:
//! - `inputs`: the run's input;
//! - `steps`: a map from each earlier step's id to `{ "output": ... }`, with
//!   `"skipped": true` for a step whose `if:` was false and `"error": {...}`
//!   for a failed step with `continue_on_error`; write `steps["fan-out"]` for
//!   an id with a `-`;
//! - `run`: `{ "id": ..., "workflow": ... }`.

use std::collections::HashMap;
use std::sync::Arc;

use cel::common::ast::{EntryExpr, Expr, IdedExpr, LiteralValue};
use cel::{Env, Program};
use serde_json::{Map, Value};

/// A JSON value whose strings may hold `${{ }}` expressions.
#[derive(Debug, Clone)]
pub struct Template {
    /// The path of the template's root, such as `with`, for messages.
    path: String,
    node: Node,
}

#[derive(Debug, Clone)]
enum Node {
    Literal(Value),
    Expr(Expression),
    Concat(Vec<Piece>),
    Array(Vec<(String, Node)>),
    Object(Vec<(String, String, Node)>),
}

#[derive(Debug, Clone)]
enum Piece {
    Text(String),
    Expr(Expression),
}

#[derive(Clone)]
struct Expression {
    source: String,
    program: Arc<Program>,
}

impl std::fmt::Debug for Expression {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "${{{{ {} }}}}", self.source)
    }
}

/// Why an expression could not be evaluated for a run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: `{expression}` failed: {message}")]
pub struct EvalError {
    /// The field that holds the expression, such as `with.order.id`.
    pub path: String,
    /// The expression's source.
    pub expression: String,
    /// What went wrong.
    pub message: String,
}

/// The values expressions can see, converted to CEL once, when added.
#[derive(Clone)]
pub struct Scope {
    env: Arc<Env>,
    inputs: cel::Value,
    /// Shared until changed: a scope is cloned for every ready leaf and
    /// kept by the walk's cursor, and an expression takes it whole as its
    /// `steps`, so copying it per clone or per evaluation cost runs of
    /// many steps time in the square of their length.
    steps: cel::objects::Map,
    run: cel::Value,
    /// `item`, `index`, `iteration`, `error`, where they apply.
    locals: HashMap<String, cel::Value>,
}

impl std::fmt::Debug for Scope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scope")
            .field("steps", &self.steps.map.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

/// CEL's standard library, built once for every scope: it declares every
/// function and overload (kilobytes), and building it for each run cost
/// each resident run most of its memory and the committing thread the
/// time to free it when the run ended.
static STDLIB: std::sync::LazyLock<Arc<Env>> = std::sync::LazyLock::new(|| Arc::new(Env::stdlib()));

impl Scope {
    /// A scope for run `run_id` of `workflow` with `inputs` and no steps yet.
    pub fn new(workflow: &str, run_id: &str, inputs: &Value) -> Self {
        Self {
            env: Arc::clone(&STDLIB),
            inputs: to_cel(inputs),
            steps: cel::objects::Map {
                map: Arc::new(HashMap::new()),
            },
            run: to_cel(&serde_json::json!({ "id": run_id, "workflow": workflow })),
            locals: HashMap::new(),
        }
    }

    /// Makes `value` visible as the variable `name` (`item`, `index`,
    /// `iteration` or `error`).
    pub fn set_local(&mut self, name: &str, value: &Value) {
        self.locals.insert(name.to_owned(), to_cel(value));
    }

    /// Makes step `id`'s output visible as `steps.<id>.output`.
    pub fn add_step_output(&mut self, id: &str, output: &Value) {
        self.add_step(id, &serde_json::json!({ "output": output }));
    }

    /// Takes the `steps` of `inner`, a scope derived from this one for a
    /// nested body, so that later steps see what the body did.
    pub fn adopt_steps(&mut self, inner: &Scope) {
        self.steps.clone_from(&inner.steps);
    }

    /// Makes a step's entry, converted once with [`StepEntry::new`],
    /// visible as `steps.<id>`.
    pub fn add_entry(&mut self, id: &str, entry: &StepEntry) {
        Arc::make_mut(&mut self.steps.map).insert(id.into(), entry.0.clone());
    }

    /// Makes `entry`, an object such as `{"output": null, "skipped": true}`,
    /// visible as `steps.<id>`.
    pub fn add_step(&mut self, id: &str, entry: &Value) {
        Arc::make_mut(&mut self.steps.map).insert(id.into(), to_cel(entry));
    }
}

/// A step's entry in `steps` (`{"output": ...}`), converted for
/// expressions once and cheap to clone.
#[derive(Clone)]
pub struct StepEntry(cel::Value);

impl std::fmt::Debug for StepEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StepEntry(..)")
    }
}

impl StepEntry {
    /// Converts `entry`.
    pub fn new(entry: &Value) -> Self {
        Self(to_cel(entry))
    }
}

impl Template {
    /// Compiles every expression in `value`. `path` names `value` in errors,
    /// such as `with`; an error's text starts with the path of the field.
    pub fn compile(value: &Value, path: &str) -> Result<Self, String> {
        compile_node(value, path).map(|node| Template {
            path: path.to_owned(),
            node,
        })
    }

    /// Checks that every `steps.<id>` this template names is one of `known`
    /// and that it uses no variable but `vars`.
    pub fn check_references(&self, known: &[&str], vars: &[&str]) -> Result<(), String> {
        let mut problem = None;
        visit_expressions(&self.node, &self.path, &mut |path, expr| {
            if problem.is_some() {
                return;
            }
            let mut bound = Vec::new();
            if let Err(m) = check_expr(expr.program.expression(), known, vars, &mut bound) {
                problem = Some(format!("{path}: `{}`: {m}", expr.source));
            }
        });
        problem.map_or(Ok(()), Err)
    }

    /// The template's value when it holds no expression.
    pub fn literal(&self) -> Option<&Value> {
        match &self.node {
            Node::Literal(value) => Some(value),
            _ => None,
        }
    }

    /// Whether the template is text with expressions inside: it always
    /// evaluates to a string.
    pub fn is_text(&self) -> bool {
        matches!(self.node, Node::Concat(_))
    }

    /// Evaluates the template in `scope`.
    pub fn eval(&self, scope: &Scope) -> Result<Value, EvalError> {
        if let Node::Literal(value) = &self.node {
            return Ok(value.clone());
        }
        let mut context = cel::Context::with_env(scope.env.clone());
        context.add_variable_from_value("inputs", scope.inputs.clone());
        context.add_variable_from_value("run", scope.run.clone());
        context.add_variable_from_value("steps", cel::Value::Map(scope.steps.clone()));
        for (name, value) in &scope.locals {
            context.add_variable_from_value(name.as_str(), value.clone());
        }
        eval_node(&self.node, &context, &self.path)
    }
}

/// JSON to CEL. Integers become CEL `int` when they fit, so that arithmetic
/// with literals (`inputs.n * 2`) works; only integers above `i64::MAX`
/// become `uint`.
fn to_cel(value: &Value) -> cel::Value {
    match value {
        Value::Null => cel::Value::Null,
        Value::Bool(b) => cel::Value::Bool(*b),
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => cel::Value::Int(i),
            (None, Some(u)) => cel::Value::UInt(u),
            _ => cel::Value::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        Value::String(s) => cel::Value::String(Arc::new(s.clone())),
        Value::Array(items) => cel::Value::List(Arc::new(items.iter().map(to_cel).collect())),
        Value::Object(fields) => fields
            .iter()
            .map(|(k, v)| (k.clone(), to_cel(v)))
            .collect::<HashMap<String, cel::Value>>()
            .into(),
    }
}

fn eval_error(path: &str, expression: &str, message: String) -> EvalError {
    EvalError {
        path: path.to_owned(),
        expression: expression.to_owned(),
        message,
    }
}

fn compile_node(value: &Value, path: &str) -> Result<Node, String> {
    Ok(match value {
        Value::String(text) if text.contains("${{") => compile_string(text, path)?,
        Value::Array(items) => {
            let nodes = items
                .iter()
                .enumerate()
                .map(|(i, item)| {
                    let path = format!("{path}[{i}]");
                    compile_node(item, &path).map(|node| (path, node))
                })
                .collect::<Result<Vec<_>, _>>()?;
            if nodes.iter().all(|(_, n)| matches!(n, Node::Literal(_))) {
                Node::Literal(value.clone())
            } else {
                Node::Array(nodes)
            }
        }
        Value::Object(fields) => {
            let nodes = fields
                .iter()
                .map(|(key, item)| {
                    let path = format!("{path}.{key}");
                    compile_node(item, &path).map(|node| (key.clone(), path, node))
                })
                .collect::<Result<Vec<_>, _>>()?;
            if nodes.iter().all(|(_, _, n)| matches!(n, Node::Literal(_))) {
                Node::Literal(value.clone())
            } else {
                Node::Object(nodes)
            }
        }
        other => Node::Literal(other.clone()),
    })
}

/// Splits `text` into literal text and `${{ }}` expressions. The end of an
/// expression is the first `}}` outside string literals and outside braces
/// the expression opened, so map literals may nest.
/// The parser's errors as one line. Written here rather than by their
/// `Display`, which panics on an error without a column (one past the
/// parser's recursion limit has none).
fn parse_errors(errors: &cel::ParseErrors) -> String {
    let shown: Vec<String> = errors
        .errors
        .iter()
        .map(|e| match e.pos {
            (line, column) if line > 0 && column >= 0 => {
                format!("{line}:{}: {}", column + 1, e.msg)
            }
            _ => e.msg.clone(),
        })
        .collect();
    shown.join("; ")
}

fn compile_string(text: &str, path: &str) -> Result<Node, String> {
    let mut pieces = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find("${{") {
        if start > 0 {
            pieces.push(Piece::Text(rest[..start].to_owned()));
        }
        let body = &rest[start + 3..];
        let end =
            expression_end(body).ok_or_else(|| format!("{path}: `${{{{` has no closing `}}}}`"))?;
        let source = body[..end].trim();
        if source.is_empty() {
            return Err(format!("{path}: empty expression `${{{{ }}}}`"));
        }
        let program = Program::compile(source).map_err(|e| {
            format!(
                "{path}: `{source}` is not a valid CEL expression: {}",
                parse_errors(&e)
            )
        })?;
        pieces.push(Piece::Expr(Expression {
            source: source.to_owned(),
            program: Arc::new(program),
        }));
        rest = &body[end + 2..];
    }
    if !rest.is_empty() {
        pieces.push(Piece::Text(rest.to_owned()));
    }
    Ok(match pieces.as_slice() {
        [Piece::Expr(expr)] => Node::Expr(expr.clone()),
        _ => Node::Concat(pieces),
    })
}

fn expression_end(body: &str) -> Option<usize> {
    let bytes = body.as_bytes();
    let mut depth = 0usize;
    let mut quote: Option<u8> = None;
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        match quote {
            Some(q) => {
                if b == b'\\' {
                    i += 1;
                } else if b == q {
                    quote = None;
                }
            }
            None => match b {
                b'"' | b'\'' => quote = Some(b),
                b'{' => depth += 1,
                b'}' if depth > 0 => depth -= 1,
                b'}' if bytes.get(i + 1) == Some(&b'}') => return Some(i),
                _ => {}
            },
        }
        i += 1;
    }
    None
}

fn visit_expressions<'a>(node: &'a Node, path: &str, f: &mut impl FnMut(&str, &'a Expression)) {
    match node {
        Node::Literal(_) => {}
        Node::Expr(expr) => f(path, expr),
        Node::Concat(pieces) => {
            for piece in pieces {
                if let Piece::Expr(expr) = piece {
                    f(path, expr);
                }
            }
        }
        Node::Array(items) => {
            for (path, node) in items {
                visit_expressions(node, path, f);
            }
        }
        Node::Object(fields) => {
            for (_, path, node) in fields {
                visit_expressions(node, path, f);
            }
        }
    }
}

/// Walks an expression: every free identifier must be a known variable, and
/// every `steps.<id>` / `steps["<id>"]` must name a known step.
fn check_expr<'a>(
    expr: &'a IdedExpr,
    known: &[&str],
    vars: &[&str],
    bound: &mut Vec<&'a str>,
) -> Result<(), String> {
    match &expr.expr {
        Expr::Ident(name) => {
            if !vars.contains(&name.as_str())
                && !bound.contains(&name.as_str())
                && !name.starts_with('@')
            {
                let seen: Vec<String> = vars.iter().map(|v| format!("`{v}`")).collect();
                return Err(format!(
                    "unknown variable `{name}`; here expressions see {}",
                    seen.join(", ")
                ));
            }
        }
        Expr::Select(select) => {
            if let Expr::Ident(root) = &select.operand.expr
                && root == "steps"
                && !bound.contains(&"steps")
            {
                check_step(&select.field, known)?;
            }
            check_expr(&select.operand, known, vars, bound)?;
        }
        Expr::Call(call) => {
            if call.func_name == "_[_]"
                && let [target, index] = call.args.as_slice()
                && matches!(&target.expr, Expr::Ident(root) if root == "steps")
                && let Expr::Literal(LiteralValue::String(id)) = &index.expr
            {
                check_step(id.inner(), known)?;
            }
            if let Some(target) = &call.target {
                check_expr(target, known, vars, bound)?;
            }
            for arg in &call.args {
                check_expr(arg, known, vars, bound)?;
            }
        }
        Expr::Comprehension(comp) => {
            check_expr(&comp.iter_range, known, vars, bound)?;
            let depth = bound.len();
            bound.push(&comp.iter_var);
            if let Some(var) = &comp.iter_var2 {
                bound.push(var);
            }
            bound.push(&comp.accu_var);
            check_expr(&comp.accu_init, known, vars, bound)?;
            check_expr(&comp.loop_cond, known, vars, bound)?;
            check_expr(&comp.loop_step, known, vars, bound)?;
            check_expr(&comp.result, known, vars, bound)?;
            bound.truncate(depth);
        }
        Expr::List(list) => {
            for element in &list.elements {
                check_expr(element, known, vars, bound)?;
            }
        }
        Expr::Map(map) => {
            for entry in &map.entries {
                check_entry(&entry.expr, known, vars, bound)?;
            }
        }
        Expr::Struct(s) => {
            for entry in &s.entries {
                check_entry(&entry.expr, known, vars, bound)?;
            }
        }
        Expr::Literal(_) | Expr::Unspecified => {}
    }
    Ok(())
}

fn check_entry<'a>(
    entry: &'a EntryExpr,
    known: &[&str],
    vars: &[&str],
    bound: &mut Vec<&'a str>,
) -> Result<(), String> {
    match entry {
        EntryExpr::StructField(field) => check_expr(&field.value, known, vars, bound),
        EntryExpr::MapEntry(entry) => {
            check_expr(&entry.key, known, vars, bound)?;
            check_expr(&entry.value, known, vars, bound)
        }
    }
}

fn check_step(id: &str, known: &[&str]) -> Result<(), String> {
    if known.contains(&id) {
        Ok(())
    } else if known.is_empty() {
        Err(format!(
            "refers to step `{id}`, but no step runs before this one"
        ))
    } else {
        Err(format!(
            "refers to step `{id}`, which is not an earlier step (earlier steps: {})",
            known.join(", ")
        ))
    }
}

fn eval_node(node: &Node, context: &cel::Context, path: &str) -> Result<Value, EvalError> {
    match node {
        Node::Literal(value) => Ok(value.clone()),
        Node::Expr(expr) => eval_expr(expr, context, path),
        Node::Concat(pieces) => {
            let mut text = String::new();
            for piece in pieces {
                match piece {
                    Piece::Text(t) => text.push_str(t),
                    Piece::Expr(expr) => match eval_expr(expr, context, path)? {
                        Value::String(s) => text.push_str(&s),
                        other => text.push_str(&other.to_string()),
                    },
                }
            }
            Ok(Value::String(text))
        }
        Node::Array(items) => items
            .iter()
            .map(|(path, node)| eval_node(node, context, path))
            .collect::<Result<Vec<_>, _>>()
            .map(Value::Array),
        Node::Object(fields) => {
            let mut object = Map::new();
            for (key, path, node) in fields {
                object.insert(key.clone(), eval_node(node, context, path)?);
            }
            Ok(Value::Object(object))
        }
    }
}

fn eval_expr(expr: &Expression, context: &cel::Context, path: &str) -> Result<Value, EvalError> {
    let value = expr
        .program
        .execute(context)
        .map_err(|e| eval_error(path, &expr.source, describe(&e)))?;
    value.json().map_err(|e| {
        eval_error(
            path,
            &expr.source,
            format!("the result has no JSON form: {e}"),
        )
    })
}

/// How an evaluation error reads in a workflow's terms: the operator as
/// written and each value's CEL type with the value, not the evaluator's
/// names (`Unsupported binary operator 'sub': Int(1), String("a")` reads
/// ``cannot apply `-` to int `1` and string `"a"` ``).
fn describe(error: &cel::ExecutionError) -> String {
    use cel::ExecutionError as E;
    let operator = |name: &'static str| match name {
        "add" => "+",
        "sub" => "-",
        "mul" => "*",
        "div" => "/",
        "rem" => "%",
        other => other,
    };
    match error {
        E::UnsupportedBinaryOperator(op, left, right) => format!(
            "cannot apply `{}` to {} and {}",
            operator(op),
            shown(left),
            shown(right)
        ),
        E::Overflow("negate", value, _) => format!("negating {} overflows", shown(value)),
        E::Overflow(op, left, right) => format!(
            "{} `{}` {} overflows",
            shown(left),
            operator(op),
            shown(right)
        ),
        E::ValuesNotComparable(left, right) => {
            format!("{} cannot be compared to {}", shown(left), shown(right))
        }
        E::UnsupportedIndex(index, target) => {
            format!("{} cannot index {}", shown(index), shown(target))
        }
        E::UnsupportedKeyType(key) => format!("{} cannot be a map's key", shown(key)),
        E::UnsupportedTargetType { target } => format!("{} is not a valid argument", shown(target)),
        E::NotSupportedAsMethod { method, target } => {
            format!("`{method}` is not a method of {}", shown(target))
        }
        E::DivisionByZero(value) => format!("{} divided by zero", shown(value)),
        E::RemainderByZero(value) => format!("the remainder of {} by zero", shown(value)),
        other => other.to_string(),
    }
}

/// A CEL value as an error shows it: its type, then the value as JSON
/// (`int `1``, `string `"a"``), or the type alone when it has no JSON form.
fn shown(value: &cel::Value) -> String {
    let kind = value.type_of();
    match value.json() {
        Ok(json) => {
            let mut text = json.to_string();
            if text.len() > 60 {
                let cut = (0..=60)
                    .rev()
                    .find(|&i| text.is_char_boundary(i))
                    .unwrap_or(0);
                text.truncate(cut);
                text.push('…');
            }
            format!("{kind} `{text}`")
        }
        Err(_) => kind.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn eval(template: Value, scope: &Scope) -> Result<Value, EvalError> {
        Template::compile(&template, "with").unwrap().eval(scope)
    }

    const VARS: [&str; 3] = ["inputs", "steps", "run"];

    fn scope() -> Scope {
        let mut scope = Scope::new(
            "wf",
            "run-1",
            &json!({ "name": "Ada", "n": 2, "tags": ["a", "b"] }),
        );
        scope.add_step_output("fan-out", &json!({ "count": 3 }));
        scope.add_step_output("first", &json!({ "items": [{ "sku": "x" }] }));
        scope
    }

    #[test]
    fn a_lone_expression_keeps_its_type() {
        let s = scope();
        assert_eq!(eval(json!("${{ inputs.n * 2 }}"), &s).unwrap(), json!(4));
        assert_eq!(
            eval(json!("${{ steps.first.output }}"), &s).unwrap(),
            json!({ "items": [{ "sku": "x" }] })
        );
        assert_eq!(
            eval(json!("${{ steps['fan-out'].output.count }}"), &s).unwrap(),
            json!(3)
        );
        assert_eq!(
            eval(json!("${{ {'a': {'b': inputs.n}} }}"), &s).unwrap(),
            json!({ "a": { "b": 2 } })
        );
    }

    #[test]
    fn mixed_text_becomes_a_string() {
        let s = scope();
        assert_eq!(
            eval(json!("Hi ${{ inputs.name }}, n=${{ inputs.n }} tags=${{ inputs.tags }} (${{ run.id }})"), &s).unwrap(),
            json!("Hi Ada, n=2 tags=[\"a\",\"b\"] (run-1)")
        );
    }

    #[test]
    fn nested_values_are_evaluated_in_place() {
        let s = scope();
        assert_eq!(
            eval(json!({ "a": ["${{ inputs.name }}", 1], "b": { "c": "${{ size(inputs.tags) }}" }, "d": true }), &s).unwrap(),
            json!({ "a": ["Ada", 1], "b": { "c": 2 }, "d": true })
        );
    }

    #[test]
    fn errors_name_the_field_and_expression() {
        let s = scope();
        let e = eval(json!({ "x": { "y": "${{ inputs.missing.deeper }}" } }), &s).unwrap_err();
        assert_eq!(e.path, "with.x.y");
        assert_eq!(e.expression, "inputs.missing.deeper");
        let e = Template::compile(&json!(["ok", "${{ 1 + }}"]), "with").unwrap_err();
        assert!(
            e.starts_with("with[1]: `1 +` is not a valid CEL expression"),
            "{e}"
        );
        let e = eval(json!("${{ inputs.nope }}"), &s).unwrap_err();
        assert_eq!(e.path, "with", "a lone expression is named by its root");
        let e = Template::compile(&json!("${{ inputs.x"), "with").unwrap_err();
        assert!(e.contains("no closing"), "{e}");
        // A wrong type is said in CEL's terms, not the evaluator's.
        let e = eval(json!("${{ inputs.n - inputs.name }}"), &s).unwrap_err();
        assert!(
            e.message
                .contains("cannot apply `-` to int `2` and string `\"Ada\"`"),
            "{e:?}"
        );
        let e = eval(json!("${{ inputs.n / 0 }}"), &s).unwrap_err();
        assert!(e.message.contains("int `2` divided by zero"), "{e:?}");
    }

    #[test]
    fn references_are_checked_against_earlier_steps() {
        let t = Template::compile(
            &json!("${{ steps.a.output + steps['b-c'].output }}"),
            "with",
        )
        .unwrap();
        assert!(t.check_references(&["a", "b-c"], &VARS).is_ok());
        assert!(
            t.check_references(&["a"], &VARS)
                .unwrap_err()
                .contains("`b-c`")
        );
        let t = Template::compile(&json!("${{ inputs.tags.map(t, t + '!') }}"), "with").unwrap();
        assert!(t.check_references(&[], &VARS).is_ok());
        let t = Template::compile(&json!("${{ input.x }}"), "with").unwrap();
        assert!(
            t.check_references(&[], &VARS)
                .unwrap_err()
                .contains("unknown variable `input`")
        );
    }
}
