//! `$(VAR)` references in env values, commands and args, expanded as upstream's kubelet does
//! (`third_party/forked/golang/expansion`): a reference to a defined variable becomes its value,
//! an undefined one stays as written, `$$` is a literal `$`, and anything else is left alone.

use std::collections::HashMap;

use crate::cri::KeyValue;

/// Expands `$(NAME)` in `input` from `vars`.
pub fn expand(input: &str, vars: &HashMap<&str, &str>) -> String {
    let bytes = input.as_bytes();
    let mut out = String::with_capacity(input.len());
    let mut checkpoint = 0;
    let mut cursor = 0;
    while cursor < bytes.len() {
        if bytes[cursor] == b'$' && cursor + 1 < bytes.len() {
            out.push_str(&input[checkpoint..cursor]);
            let rest = &input[cursor + 1..];
            let advance = match rest.as_bytes()[0] {
                b'$' => {
                    out.push('$');
                    1
                }
                b'(' => match rest.find(')') {
                    Some(close) => {
                        let name = &rest[1..close];
                        match vars.get(name) {
                            Some(value) => out.push_str(value),
                            None => out.push_str(&format!("$({name})")),
                        }
                        close + 1
                    }
                    None => {
                        out.push_str("$(");
                        1
                    }
                },
                _ => {
                    // `$` and the next character, as written (which may be multi-byte)
                    let next = rest.chars().next().map_or(1, char::len_utf8);
                    out.push('$');
                    out.push_str(&rest[..next]);
                    next
                }
            };
            cursor += advance;
            checkpoint = cursor + 1;
        }
        cursor += 1;
    }
    out.push_str(&input[checkpoint.min(input.len())..]);
    out
}

/// Expands a container's command or args from its final environment.
pub fn expand_all(args: &[String], envs: &[KeyValue]) -> Vec<String> {
    let vars: HashMap<&str, &str> = envs
        .iter()
        .map(|kv| (kv.key.as_str(), kv.value.as_str()))
        .collect();
    args.iter().map(|a| expand(a, &vars)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars() -> HashMap<&'static str, &'static str> {
        HashMap::from([("A", "1"), ("EMPTY", "")])
    }

    #[test]
    fn defined_references_expand_and_undefined_ones_stay_as_written() {
        assert_eq!(expand("x$(A)y", &vars()), "x1y");
        assert_eq!(expand("$(EMPTY)", &vars()), "");
        assert_eq!(expand("$(B) and $(A)", &vars()), "$(B) and 1");
    }

    #[test]
    fn escapes_and_malformed_references_are_upstreams() {
        assert_eq!(expand("$$(A)", &vars()), "$(A)");
        assert_eq!(expand("$$$(A)", &vars()), "$1");
        assert_eq!(expand("$(A", &vars()), "$(A");
        assert_eq!(expand("a$b", &vars()), "a$b");
        assert_eq!(expand("trailing $", &vars()), "trailing $");
        assert_eq!(expand("$é$(A)", &vars()), "$é1");
        assert_eq!(expand("no refs", &vars()), "no refs");
    }

    #[test]
    fn commands_and_args_expand_from_the_final_environment() {
        let envs = [KeyValue {
            key: "C".into(),
            value: "c".into(),
        }];
        assert_eq!(
            expand_all(&["echo".into(), "$(C)$(D)".into()], &envs),
            ["echo", "c$(D)"]
        );
    }
}
