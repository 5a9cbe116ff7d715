//! A statement as the filter and the router see it: its text tokenized once
//! and parsed once. Every check on the text works on these tokens; every
//! decision on the statement works on this tree.
//!
//! The tree is the one `SQLContext` runs: paimon-datafusion 0.4 parses every
//! statement in the generic dialect with sqlparser's default recursion limit,
//! whatever the session's `datafusion.sql_parser.dialect` says, so that is
//! how it is parsed here. A statement checked on any other reading could run
//! unchecked there (a text another dialect cannot read would pass the filter
//! untouched). A statement DataFusion's planner plans gets this tree when the
//! session's dialect is the generic one (DataFusion would read the same), and
//! its text otherwise, which DataFusion reads in the session's dialect.

use std::collections::HashMap;
use std::ops::ControlFlow;

use datafusion::prelude::SessionContext;
use datafusion::sql::sqlparser::ast::{
    visit_relations_mut, Ident, ObjectName, ObjectNamePart, SqlOption, Statement,
};
use datafusion::sql::sqlparser::dialect::{dialect_from_str, GenericDialect};
use datafusion::sql::sqlparser::keywords::Keyword;
use datafusion::sql::sqlparser::parser::Parser;
use datafusion::sql::sqlparser::tokenizer::{Token, TokenWithSpan, Tokenizer};

use super::travel;
use crate::error::{Error, Result};

/// One statement's text, its tokens and, when it is exactly one statement
/// this parser reads, its tree.
pub(crate) struct Parsed<'a> {
    sql: &'a str,
    /// Whether DataFusion's planner reads the text as this tree: the
    /// session's dialect is the generic one.
    datafusion_reads_alike: bool,
    /// Whitespace and comments included; empty when the text does not
    /// tokenize (an unterminated string), which `SQLContext` then reports.
    tokens: Vec<TokenWithSpan>,
    /// `None`: text this parser cannot read, or several statements, or one
    /// of this crate's own (`CREATE CATALOG`, `SHOW CATALOGS`).
    statement: Option<Statement>,
    /// Whether `SQLContext` rewrites a time-travel clause out of the text
    /// ([`travel::travels_in_time`]).
    travels_in_time: bool,
    /// The time-travel clauses `SQLContext` rewrites out of the text, each
    /// with its name; the tree has the placeholder [`placeholder`]`(i)`
    /// where clause `i` and its name are (see [`Self::travelled`]).
    clauses: Vec<travel::Clause>,
}

/// The prefix of the names that stand for a time-travelled table in a tree:
/// `SQLContext` runs such a statement with a temporary table of the
/// snapshot in its place (named `__paimon_tt_<uuid>`), so the statement it
/// runs has a name there, not the table's.
const PLACEHOLDER: &str = "__lakestream_time_travel_";

/// The name standing for clause `index` in a tree.
fn placeholder(index: usize) -> String {
    format!("{PLACEHOLDER}{index}")
}

impl<'a> Parsed<'a> {
    /// `sql`, as `SQLContext` reads it, in a session whose settings say
    /// whether DataFusion's planner reads it the same.
    pub(crate) fn new(sql: &'a str, session: &SessionContext) -> Self {
        let state = session.state();
        let dialect = &state.config_options().sql_parser.dialect;
        let generic = dialect_from_str(dialect).is_some_and(|d| d.is::<GenericDialect>());
        Self::read(sql, generic)
    }

    /// `sql` in a session with default settings.
    #[cfg(test)]
    pub(crate) fn generic(sql: &'a str) -> Self {
        Self::read(sql, true)
    }

    fn read(sql: &'a str, datafusion_reads_alike: bool) -> Self {
        let tokens = Tokenizer::new(&GenericDialect {}, sql)
            .tokenize_with_location()
            .unwrap_or_default();
        let travels_in_time = travel::travels_in_time(sql);
        let mut parsed = Self {
            sql,
            datafusion_reads_alike,
            tokens,
            statement: None,
            travels_in_time,
            clauses: if travels_in_time {
                travel::sqlcontext_clauses(sql)
            } else {
                Vec::new()
            },
        };
        if !parsed.tokens.is_empty() && !parsed.is_own_statement() {
            parsed.statement = match parsed.clauses.is_empty() {
                true => parsed.parse(),
                false => parsed.parse_as_sqlcontext_runs_it(),
            };
        }
        parsed
    }

    /// The statement `SQLContext` runs for a text with time-travel
    /// clauses: the text with each clause and its name replaced by a
    /// placeholder name, as it replaces them by a temporary table's.
    fn parse_as_sqlcontext_runs_it(&self) -> Option<Statement> {
        let mut text = self.sql.to_string();
        for (index, clause) in self.clauses.iter().enumerate().rev() {
            text.replace_range(clause.range.clone(), &placeholder(index));
        }
        let mut statements = Parser::new(&GenericDialect {})
            .try_with_sql(&text)
            .and_then(|mut parser| parser.parse_statements())
            .ok()?;
        match statements.len() {
            1 => statements.pop(),
            _ => None,
        }
    }

    /// The time-travel clause a name of the tree stands for, if it stands
    /// for one: `t VERSION AS OF 1` in the text is a placeholder name in
    /// the tree.
    pub(crate) fn travelled(&self, name: &ObjectName) -> Option<&travel::Clause> {
        let [ObjectNamePart::Identifier(ident)] = name.0.as_slice() else {
            return None;
        };
        if ident.quote_style.is_some() {
            return None;
        }
        let index: usize = ident.value.strip_prefix(PLACEHOLDER)?.parse().ok()?;
        self.clauses.get(index)
    }

    /// Whether the tree has time-travel clauses in placeholders: only
    /// `SQLContext` runs such a statement, from its text.
    pub(crate) fn has_travelled_names(&self) -> bool {
        !self.clauses.is_empty()
    }

    /// `statement` (this statement's tree, or one made from it) as text
    /// for `SQLContext`, each placeholder written as the clause it stands for.
    pub(crate) fn text_for_sqlcontext(&self, statement: &Statement) -> String {
        let mut statement = statement.clone();
        let _ = visit_relations_mut(&mut statement, |name| {
            if let Some(clause) = self.travelled(name) {
                // Written out as is: the name and its clause, as the user wrote them.
                *name = ObjectName::from(vec![Ident::new(format!(
                    "{} {}",
                    clause.name, clause.clause
                ))]);
            }
            ControlFlow::<()>::Continue(())
        });
        statement.to_string()
    }

    /// The statement's text, as given.
    pub(crate) fn sql(&self) -> &'a str {
        self.sql
    }

    /// The statement's tokens, whitespace and comments included.
    pub(crate) fn tokens(&self) -> impl Iterator<Item = &Token> + Clone {
        self.tokens.iter().map(|t| &t.token)
    }

    /// The statement's tokens without whitespace and comments.
    pub(crate) fn significant(&self) -> impl Iterator<Item = &Token> + Clone {
        self.tokens().filter(|t| !matches!(t, Token::Whitespace(_)))
    }

    /// Whether `SQLContext` finds a time-travel clause in the text, which it
    /// rewrites before parsing ([`travel::travels_in_time`]).
    pub(crate) fn travels_in_time(&self) -> bool {
        self.travels_in_time
    }

    /// The statement, when the text is exactly one statement this parser reads.
    pub(crate) fn statement(&self) -> Option<&Statement> {
        self.statement.as_ref()
    }

    /// Takes the statement for DataFusion's planner, when it reads the text
    /// as this tree (otherwise it gets the text).
    pub(crate) fn take_statement_for_datafusion(&mut self) -> Option<Statement> {
        if !self.datafusion_reads_alike || self.has_travelled_names() {
            return None;
        }
        self.statement.take()
    }

    /// Runs `parse` on a parser over the statement's tokens.
    fn with_parser<T>(&self, parse: impl FnOnce(&mut Parser<'_>) -> T) -> T {
        let mut parser =
            Parser::new(&GenericDialect {}).with_tokens_with_locations(self.tokens.clone());
        parse(&mut parser)
    }

    fn parse(&self) -> Option<Statement> {
        let mut statements = self.with_parser(|p| p.parse_statements()).ok()?;
        match statements.len() {
            1 => statements.pop(),
            _ => None,
        }
    }

    /// The keywords of the first `n` tokens that are not whitespace or
    /// comments (`NoKeyword` for other tokens).
    fn head(&self, n: usize) -> Vec<Keyword> {
        self.significant()
            .take(n)
            .map(|t| match t {
                Token::Word(word) if word.quote_style.is_none() => word.keyword,
                _ => Keyword::NoKeyword,
            })
            .collect()
    }

    fn is_own_statement(&self) -> bool {
        matches!(
            self.head(2).as_slice(),
            [Keyword::CREATE, Keyword::CATALOG] | [Keyword::SHOW, Keyword::CATALOGS]
        )
    }

    /// `CREATE CATALOG [IF NOT EXISTS] name WITH ('key' = 'value', ...)`;
    /// `Ok(None)` for any other statement.
    pub(crate) fn create_catalog(&self) -> Result<Option<CreateCatalog>> {
        if self.head(2) != [Keyword::CREATE, Keyword::CATALOG] {
            return Ok(None);
        }
        self.with_parser(parse_create_catalog)
    }

    /// Whether the statement is `SHOW CATALOGS`.
    pub(crate) fn is_show_catalogs(&self) -> bool {
        let keyword = |token: &Token, keyword: Keyword| matches!(token, Token::Word(word) if word.keyword == keyword);
        let significant: Vec<&Token> = self.significant().take(4).collect();
        match significant.as_slice() {
            [show, catalogs] | [show, catalogs, Token::SemiColon] => {
                keyword(show, Keyword::SHOW) && keyword(catalogs, Keyword::CATALOGS)
            }
            _ => false,
        }
    }

    /// Whether the statement is `CREATE [OR REPLACE] [UNBOUNDED] EXTERNAL TABLE`:
    /// DataFusion's own syntax, which only its parser reads.
    pub(crate) fn is_create_external(&self) -> bool {
        let head = self.head(6);
        let mut rest = head.as_slice();
        let Some(rest_after_create) = rest.strip_prefix(&[Keyword::CREATE]) else {
            return false;
        };
        rest = rest_after_create;
        if let Some(r) = rest.strip_prefix(&[Keyword::OR, Keyword::REPLACE]) {
            rest = r;
        }
        if let Some(r) = rest.strip_prefix(&[Keyword::UNBOUNDED]) {
            rest = r;
        }
        rest.starts_with(&[Keyword::EXTERNAL, Keyword::TABLE])
    }

    /// The table named by `CREATE OR REPLACE [EXTERNAL] TABLE [IF NOT EXISTS] name ...`.
    ///
    /// Only the statement's head is parsed: the rest may use syntax that
    /// `SQLContext` rewrites before parsing (`PARTITIONED BY (a)`).
    pub(crate) fn create_or_replace_target(&self) -> Option<ObjectName> {
        if !self
            .head(3)
            .starts_with(&[Keyword::CREATE, Keyword::OR, Keyword::REPLACE])
        {
            return None;
        }
        self.with_parser(|parser| {
            if !parser.parse_keywords(&[Keyword::CREATE, Keyword::OR, Keyword::REPLACE]) {
                return None;
            }
            if parser
                .parse_one_of_keywords(&[Keyword::TEMPORARY, Keyword::TEMP])
                .is_some()
            {
                return None;
            }
            let _ = parser.parse_keyword(Keyword::EXTERNAL);
            if !parser.parse_keyword(Keyword::TABLE) {
                return None;
            }
            let _ = parser.parse_keywords(&[Keyword::IF, Keyword::NOT, Keyword::EXISTS]);
            parser.parse_object_name(false).ok()
        })
    }
}

/// `CREATE CATALOG ...` from its first token; `Ok(None)` when it is not one.
fn parse_create_catalog(parser: &mut Parser<'_>) -> Result<Option<CreateCatalog>> {
    if !parser.parse_keywords(&[Keyword::CREATE, Keyword::CATALOG]) {
        return Ok(None);
    }

    let syntax = |e: &dyn std::fmt::Display| Error::InvalidStatement {
        statement: "CREATE CATALOG".to_string(),
        reason: format!(
            "{e}; write CREATE CATALOG [IF NOT EXISTS] name WITH ('warehouse' = '...', ...)"
        ),
    };
    let if_not_exists = parser.parse_keywords(&[Keyword::IF, Keyword::NOT, Keyword::EXISTS]);
    let name = parser.parse_identifier().map_err(|e| syntax(&e))?.value;
    let options = parser
        .parse_options(Keyword::WITH)
        .map_err(|e| syntax(&e))?;
    let _ = parser.consume_token(&Token::SemiColon);
    if parser.peek_token().token != Token::EOF {
        return Err(syntax(&format!(
            "unexpected '{}' after the options",
            parser.peek_token().token
        )));
    }
    let mut map = HashMap::new();
    for option in options {
        match option {
            SqlOption::KeyValue { key, value } => {
                map.insert(key.value.clone(), unquote(&value.to_string()));
            }
            other => {
                return Err(syntax(&format!(
                    "'{other}' is not a 'key' = 'value' option"
                )))
            }
        }
    }
    Ok(Some(CreateCatalog {
        name,
        if_not_exists,
        options: map,
    }))
}

/// `CREATE CATALOG [IF NOT EXISTS] name WITH ('key' = 'value', ...)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CreateCatalog {
    pub(crate) name: String,
    pub(crate) if_not_exists: bool,
    pub(crate) options: HashMap<String, String>,
}

/// `text` without the spaces around it and the quotes (`'`, `"`, `` ` ``)
/// at its ends: an option's key or value as written.
pub(crate) fn unquote(text: &str) -> String {
    text.trim().trim_matches(['\'', '"', '`']).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `SQLContext` reads every statement in the generic dialect: the
    /// filter must check what it runs, whatever the session's dialect. In
    /// MySQL, `--'` opens a string; in the generic dialect it is a comment.
    #[test]
    fn a_statement_is_read_as_sqlcontext_reads_it_in_any_dialect() {
        let config = datafusion::prelude::SessionConfig::new()
            .set_str("datafusion.sql_parser.dialect", "MySQL");
        let session = SessionContext::new_with_config(config);
        let mut parsed = Parsed::new("TRUNCATE TABLE t --'", &session);
        assert!(parsed.statement().is_some());
        // DataFusion reads it in MySQL: it gets the text, not this tree.
        assert!(parsed.take_statement_for_datafusion().is_none());
        let mut parsed = Parsed::new("TRUNCATE TABLE t", &SessionContext::new());
        assert!(parsed.take_statement_for_datafusion().is_some());
    }

    #[test]
    fn several_statements_or_unreadable_text_have_no_tree() {
        assert!(Parsed::generic("SELECT 1; SELECT 2").statement().is_none());
        assert!(Parsed::generic("SELECT 'unterminated")
            .statement()
            .is_none());
        assert!(Parsed::generic("SELECT 1;").statement().is_some());
        assert!(Parsed::generic("SHOW CATALOGS").statement().is_none());
    }
}
