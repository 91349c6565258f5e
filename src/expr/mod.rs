//! DynamoDB's expression language, with one front end: the lexer (`lexer`), the tree (`ast`) and
//! the parser (`parser`, which also resolves placeholders). Everything that reads expressions goes
//! through it: validation of the caller's expressions (`validate`), the merge of the library's own
//! clauses into a user's `UpdateExpression` (`update`), projections (`projection`), and the
//! client-side evaluation of conditions and filters for `Committed` reads (`eval`, `value`), and of
//! update expressions (`apply`).

mod apply;
mod ast;
mod eval;
mod lexer;
mod parser;
mod projection;
mod update;
mod validate;
mod value;

pub use apply::{Applied, apply_update};
pub(crate) use ast::{Clause, Cond, Path, PathElem};
#[cfg_attr(not(feature = "fault-injection"), allow(unused_imports))]
pub use eval::condition_holds;
pub(crate) use lexer::placeholders;
pub(crate) use parser::{parse_condition, parse_projection};
pub(crate) use projection::project;
pub(crate) use update::{UpdateExpr, growth_bound};
pub(crate) use validate::{
    RESERVED_PREFIX, check_names_and_values, check_no_reserved_words, check_placeholders, reserved,
};
pub use value::value_eq;
