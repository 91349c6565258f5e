//! The tokens of DynamoDB's expression language: the one lexer every grammar of the library reads
//! (conditions, filters, key conditions, projections and update expressions).

use std::collections::HashSet;

use crate::error::{Error, Result};

/// One token's kind and text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Tok {
    /// An attribute name, keyword, function name or number.
    Word(String),
    /// `#name`
    Name(String),
    /// `:value`
    Value(String),
    /// A comparator: `=`, `<>`, `<`, `<=`, `>` or `>=`.
    Comparator(&'static str),
    /// `(`, `)`, `,`, `.`, `[`, `]`, and the arithmetic of `SET` actions, `+` and `-`.
    Punct(char),
}

/// A token and where it starts in the expression (a byte offset).
#[derive(Debug, Clone)]
pub(crate) struct Token {
    pub(crate) tok: Tok,
    pub(crate) start: usize,
}

fn is_word(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// Splits `expr` into tokens. Anything DynamoDB's expression syntax has no use for (`!`, `;`, `$`,
/// quotes...) is an error.
pub(crate) fn tokenize(expr: &str) -> Result<Vec<Token>> {
    let bytes = expr.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        if c.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        let start = i;
        let tok = match c {
            b'#' | b':' => {
                i += 1;
                while i < bytes.len() && is_word(bytes[i]) {
                    i += 1;
                }
                if i == start + 1 {
                    return Err(Error::invalid(format!(
                        "invalid expression {expr:?}: empty placeholder at {start}"
                    )));
                }
                let name = expr[start..i].to_string();
                if c == b'#' {
                    Tok::Name(name)
                } else {
                    Tok::Value(name)
                }
            }
            b'<' | b'>' | b'=' => {
                let op = match (c, bytes.get(i + 1)) {
                    (b'<', Some(b'>')) => "<>",
                    (b'<', Some(b'=')) => "<=",
                    (b'>', Some(b'=')) => ">=",
                    (b'<', _) => "<",
                    (b'>', _) => ">",
                    _ => "=",
                };
                i += op.len();
                Tok::Comparator(op)
            }
            b'(' | b')' | b',' | b'.' | b'[' | b']' | b'+' | b'-' => {
                i += 1;
                Tok::Punct(c as char)
            }
            _ if is_word(c) => {
                while i < bytes.len() && is_word(bytes[i]) {
                    i += 1;
                }
                Tok::Word(expr[start..i].to_string())
            }
            _ => {
                return Err(Error::invalid(format!(
                    "invalid expression {expr:?}: unexpected character at {start}"
                )));
            }
        };
        out.push(Token { tok, start });
    }
    Ok(out)
}

/// The `#name` and `:value` placeholders an expression uses.
pub(crate) fn placeholders(expr: &str) -> Result<(HashSet<String>, HashSet<String>)> {
    let mut names = HashSet::new();
    let mut values = HashSet::new();
    for t in tokenize(expr)? {
        match t.tok {
            Tok::Name(n) => {
                names.insert(n);
            }
            Tok::Value(v) => {
                values.insert(v);
            }
            _ => {}
        }
    }
    Ok((names, values))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toks(e: &str) -> Vec<Tok> {
        tokenize(e).unwrap().into_iter().map(|t| t.tok).collect()
    }

    #[test]
    fn comparators_are_one_token() {
        assert_eq!(
            toks("a<>:b AND c<=d"),
            vec![
                Tok::Word("a".into()),
                Tok::Comparator("<>"),
                Tok::Value(":b".into()),
                Tok::Word("AND".into()),
                Tok::Word("c".into()),
                Tok::Comparator("<="),
                Tok::Word("d".into()),
            ]
        );
        assert_eq!(
            toks("a == :v")[1..3],
            [Tok::Comparator("="), Tok::Comparator("=")]
        );
    }

    /// The two grammars disagreed on `!`: the update/validation lexer let it through (DynamoDB then
    /// rejected the request), the condition lexer rejected it. DynamoDB's syntax has no `!` (`<>` is
    /// "not equal"), so the stricter lexer is kept: `a != :v` is rejected before any request.
    #[test]
    fn bang_is_not_part_of_the_language() {
        let err = tokenize("a != :v").unwrap_err();
        assert!(err.is_invalid_request());
        assert!(
            err.to_string().contains("unexpected character at 2"),
            "{err}"
        );
        assert!(tokenize("SET a = :v, #b = b - :w + :x").is_ok());
    }

    #[test]
    fn empty_placeholders_are_rejected() {
        assert!(
            tokenize("a = :")
                .unwrap_err()
                .to_string()
                .contains("empty placeholder at 4")
        );
        assert!(tokenize("# = a").is_err());
    }

    #[test]
    fn placeholders_are_collected() {
        let (n, v) = placeholders("#a = :x AND (b < :y OR #a > :x)").unwrap();
        assert_eq!(n, HashSet::from(["#a".to_string()]));
        assert_eq!(v, HashSet::from([":x".to_string(), ":y".to_string()]));
    }
}
