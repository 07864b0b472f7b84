//! `--token-auth-file`: a static CSV of bearer tokens, `token,user,uid[,"group1,group2"]` per
//! line, read once at start (upstream's `tokenfile`). A token not in the file is not this
//! authenticator's.
//!
//! The CSV reader is hand-written: one quoted-field rule is all the format needs, not worth a
//! dependency.

use std::collections::HashMap;
use std::path::Path;

use super::{TokenAuthenticator, TokenResponse, UserInfo, implicit_audiences};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("reading token file '{path}': {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "token file '{path}' must have at least 3 columns (token, user name, user uid), found {found}"
    )]
    Columns { path: String, found: usize },
    #[error("token file '{path}' line {line}: unterminated quoted field")]
    Quote { path: String, line: usize },
}

/// The tokens of one file.
#[derive(Debug, Default)]
pub struct TokenFile {
    tokens: HashMap<String, UserInfo>,
    api_audiences: Vec<String>,
}

impl TokenFile {
    pub fn load(path: &Path, api_audiences: Vec<String>) -> Result<Self, Error> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| Error::Read {
            path: shown.clone(),
            source,
        })?;
        let mut file = Self::parse(&shown, &text)?;
        file.api_audiences = api_audiences;
        Ok(file)
    }

    pub fn parse(path: &str, text: &str) -> Result<Self, Error> {
        let mut tokens = HashMap::new();
        for (n, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let record = fields(line).ok_or_else(|| Error::Quote {
                path: path.into(),
                line: n + 1,
            })?;
            if record.len() < 3 {
                return Err(Error::Columns {
                    path: path.into(),
                    found: record.len(),
                });
            }
            if record[0].is_empty() {
                tracing::warn!(path, line = n + 1, "empty token in the token file");
                continue;
            }
            let groups = match record.get(3) {
                Some(g) => g.split(',').map(str::to_string).collect(),
                None => Vec::new(),
            };
            tokens.insert(
                record[0].clone(),
                UserInfo {
                    name: record[1].clone(),
                    uid: record[2].clone(),
                    groups,
                    ..UserInfo::default()
                },
            );
        }
        Ok(Self {
            tokens,
            api_audiences: Vec::new(),
        })
    }
}

/// One CSV line's fields (leading spaces trimmed, `"…"` quoting with `""` for a quote, as Go's
/// `encoding/csv` with `TrimLeadingSpace`); `None` for an unterminated quote.
fn fields(line: &str) -> Option<Vec<String>> {
    let mut out = Vec::new();
    let mut chars = line.chars().peekable();
    loop {
        while chars.peek() == Some(&' ') {
            chars.next();
        }
        let mut field = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            loop {
                match chars.next()? {
                    '"' if chars.peek() == Some(&'"') => {
                        chars.next();
                        field.push('"');
                    }
                    '"' => break,
                    c => field.push(c),
                }
            }
            // anything after the closing quote up to the comma is kept, leniently
            while let Some(&c) = chars.peek() {
                if c == ',' {
                    break;
                }
                field.push(c);
                chars.next();
            }
        } else {
            while let Some(&c) = chars.peek() {
                if c == ',' {
                    break;
                }
                field.push(c);
                chars.next();
            }
        }
        out.push(field);
        match chars.next() {
            Some(',') => continue,
            _ => return Some(out),
        }
    }
}

impl TokenFile {
    /// The API server's audiences, the only ones these audience-agnostic tokens are good for.
    pub fn with_api_audiences(mut self, audiences: Vec<String>) -> Self {
        self.api_audiences = audiences;
        self
    }
}

impl TokenAuthenticator for TokenFile {
    fn authenticate_token(
        &self,
        token: &str,
        audiences: &[String],
    ) -> Result<Option<TokenResponse>, String> {
        let Some(user) = self.tokens.get(token) else {
            return Ok(None);
        };
        let Some(audiences) = implicit_audiences(&self.api_audiences, audiences) else {
            return Ok(None);
        };
        Ok(Some(TokenResponse {
            user: user.clone(),
            audiences,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = "\
t1,alice,u1,\"devs,ops\"
t2, bob ,u2

t3,carol,u3,solo
";

    fn user(file: &TokenFile, token: &str) -> Option<UserInfo> {
        file.authenticate_token(token, &[]).unwrap().map(|r| r.user)
    }

    #[test]
    fn a_listed_token_gives_its_user_uid_and_groups() {
        let file = TokenFile::parse("f", FILE).unwrap();
        let alice = user(&file, "t1").unwrap();
        assert_eq!(alice.name, "alice");
        assert_eq!(alice.uid, "u1");
        assert_eq!(alice.groups, vec!["devs", "ops"]);
        assert_eq!(user(&file, "t2").unwrap().name, "bob ");
        assert!(user(&file, "t2").unwrap().groups.is_empty());
        assert_eq!(user(&file, "t3").unwrap().groups, vec!["solo"]);
    }

    #[test]
    fn an_unlisted_token_is_not_this_authenticators() {
        let file = TokenFile::parse("f", FILE).unwrap();
        assert_eq!(user(&file, "nope"), None);
    }

    #[test]
    fn a_line_with_fewer_than_three_columns_is_refused_with_upstreams_message() {
        let err = TokenFile::parse("/etc/tokens.csv", "t1,alice\n")
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "token file '/etc/tokens.csv' must have at least 3 columns (token, user name, user uid), found 2"
        );
    }

    #[test]
    fn quoted_fields_keep_commas_and_doubled_quotes() {
        assert_eq!(
            fields(r#"a,"b,""c""",d"#).unwrap(),
            vec!["a", "b,\"c\"", "d"]
        );
        assert_eq!(fields(r#"a,"b"#), None);
    }

    #[test]
    fn a_token_asked_for_another_audience_is_not_accepted() {
        let mut file = TokenFile::parse("f", FILE).unwrap();
        file.api_audiences = vec!["api".into()];
        assert!(
            file.authenticate_token("t1", &["vault".into()])
                .unwrap()
                .is_none()
        );
    }
}
