//! Property tests of the MySQL statement splitter: it never panics, its pieces rejoined with
//! the separators give back the text, and statements built from quotes and comments holding
//! `;` come back exactly as they were joined.

use proptest::prelude::*;
use proto::mysql::split::{MAX_STATEMENTS, may_split, pieces, statements};

/// Text rich in the bytes the splitter looks at, and some multi-byte characters.
fn tricky_text() -> impl Strategy<Value = String> {
    proptest::collection::vec(
        prop_oneof![
            Just(";"),
            Just("'"),
            Just("\""),
            Just("`"),
            Just("\\"),
            Just("#"),
            Just("-"),
            Just("--"),
            Just("/*"),
            Just("*/"),
            Just("/*!"),
            Just("/*M!"),
            Just("*"),
            Just("/"),
            Just("\n"),
            Just(" "),
            Just("\t"),
            Just("a"),
            Just("SELECT"),
            Just(" BEGIN "),
            Just(" END "),
            Just(" CASE "),
            Just("CREATE PROCEDURE p() "),
            Just("BEGIN NOT ATOMIC "),
            Just("é"),
            Just("日本"),
        ],
        0..60,
    )
    .prop_map(|v| v.concat())
}

/// One fragment of a statement that keeps any `;` it holds from separating.
fn fragment() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z]{1,5}",
        "[0-9]{1,3}",
        Just("-".to_string()),
        Just("*".to_string()),
        "[a-z ;\"`#*/-]{0,6}".prop_map(|s| format!("'{s}'")),
        Just(r"'it''s;'".to_string()),
        Just(r"'a\';b'".to_string()),
        "[a-z ;'`#*/-]{0,6}".prop_map(|s| format!("\"{s}\"")),
        Just(r#""x\";y""#.to_string()),
        "[a-z ;'\"#*/-]{0,6}".prop_map(|s| format!("`{s}`")),
        Just("`a``;b`".to_string()),
        "[a-z ;'\"`#-]{0,6}".prop_map(|s| format!("/* {s} */")),
        "[a-z ;'\"`#-]{0,6}".prop_map(|s| format!("/*!50000 {s} */")),
        "[a-z ;'\"`#*/-]{0,6}".prop_map(|s| format!("-- {s}\n")),
        "[a-z ;'\"`#*/-]{0,6}".prop_map(|s| format!("# {s}\n")),
    ]
}

/// A statement: a word, fragments, a word (so it starts and ends with code, not whitespace).
fn statement() -> impl Strategy<Value = String> {
    (
        "[a-z]{1,6}",
        proptest::collection::vec(fragment(), 0..6),
        "[a-z]{1,4}",
    )
        .prop_map(|(a, mid, z)| {
            let mut s = a;
            for f in mid {
                s.push(' ');
                s.push_str(&f);
            }
            s.push(' ');
            s.push_str(&z);
            s
        })
}

/// What may stand between statements: a separator with whitespace and comments around it.
fn separator() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(";".to_string()),
        Just(" ; ".to_string()),
        Just(";\n".to_string()),
        Just("\n;\t".to_string()),
        Just("; ;".to_string()),
        Just("; /* between; */ ;".to_string()),
        Just("; -- note;\n;".to_string()),
        Just("; # note;\n ;".to_string()),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, .. ProptestConfig::default() })]

    #[test]
    fn pieces_rejoin_to_the_text(sql in tricky_text()) {
        let p = pieces(&sql);
        prop_assert!(!p.is_empty());
        let joined: Vec<&str> = p.iter().map(|p| &sql[p.range.clone()]).collect();
        prop_assert_eq!(joined.join(";"), sql.clone());
        for w in p.windows(2) {
            prop_assert_eq!(&sql[w[0].range.end..w[1].range.start], ";");
        }
    }

    #[test]
    fn statements_are_trimmed_runs_of_pieces(sql in tricky_text()) {
        let s = statements(&sql);
        // The session splits only a text that may split.
        prop_assert!(may_split(&sql) || (s.len() <= 1 && pieces(&sql).len() == 1));
        prop_assert!(s.len() <= MAX_STATEMENTS);
        let p = pieces(&sql);
        let mut last_end = 0;
        for r in &s {
            let t = &sql[r.clone()];
            prop_assert!(!t.is_empty());
            prop_assert_eq!(t.trim_matches(|c: char| c.is_ascii_whitespace()), t);
            prop_assert!(r.start >= last_end);
            last_end = r.end;
            // It starts where a piece holding code starts and ends where one ends (a compound
            // statement spans several), whitespace aside.
            let starts = p.iter().any(|p| {
                p.code && p.range.start <= r.start && sql[p.range.start..r.start].trim().is_empty()
            });
            prop_assert!(starts, "{:?} starts inside a piece", t);
            let ends = p.iter().any(|p| p.code && p.range.end >= r.end && sql[r.end..p.range.end].trim().is_empty());
            prop_assert!(ends, "{:?} ends inside a piece", t);
        }
        prop_assert!(s.len() <= p.iter().filter(|p| p.code).count());
    }

    #[test]
    fn joined_statements_come_back(
        stmts in proptest::collection::vec(statement(), 1..8),
        seps in proptest::collection::vec(separator(), 8),
        lead in prop_oneof![Just(""), Just("  "), Just("/* head; */ ")],
        trail in prop_oneof![Just(""), Just(";"), Just("; -- end;"), Just(" ;\n")],
    ) {
        let mut sql = lead.to_string();
        for (i, s) in stmts.iter().enumerate() {
            if i > 0 {
                sql.push_str(&seps[i]);
            }
            sql.push_str(s);
        }
        sql.push_str(trail);
        let got: Vec<&str> = statements(&sql).into_iter().map(|r| &sql[r]).collect();
        let mut want: Vec<String> = stmts.clone();
        if let Some(first) = want.first_mut()
            && lead.starts_with("/*")
        {
            *first = format!("{lead}{first}");
        }
        prop_assert_eq!(got, want);
    }
}
