//! A document's size as the parser will build it, bounded before it is
//! built. YAML aliases repeat what their anchor names each time they are
//! used, so a few kilobytes can stand for gigabytes of values; the typed
//! parse would build all of them. [`check`] walks the document once,
//! holding nothing, and stops at the first bound it passes.

use serde::de::{self, DeserializeSeed, Deserializer, EnumAccess, MapAccess, SeqAccess, Visitor};
use std::cell::Cell;
use std::fmt;

/// The most values (scalars, lists and maps, each time an alias repeats
/// them) a definition or test file may hold. No workflow needs more; a
/// large input belongs in a run's input, not its definition.
pub const MAX_VALUES: usize = 250_000;

/// The values a document may hold beyond twice its size in bytes. Written
/// out, a document holds at most about 1.5 values a byte (the densest
/// found is a flow map of empty tagged keys, `{!,!,!}`: each tag, empty key
/// and implied null counts), so only aliases pass twice the size: they may
/// add this many, enough for the anchors a person writes, and a bomb is
/// refused after walking little more than its own size rather than all of
/// [`MAX_VALUES`].
pub const ALIAS_SLACK: usize = 16_384;

/// The bytes of scalar text a document may expand to beyond its own size:
/// with aliases counted each time they are used, the text is at most twice
/// the file plus this.
pub const EXPANSION_SLACK: usize = 1 << 20;

/// The deepest lists and maps may nest, by brackets or by indentation.
pub const MAX_DEPTH: usize = super::parse::MAX_NESTING;

/// Why a document was refused before it was built.
#[derive(Debug)]
pub(crate) struct Refused {
    pub(crate) message: String,
    pub(crate) line: Option<usize>,
    pub(crate) column: Option<usize>,
}

/// Walks the YAML (or JSON) `source` without building it, and refuses it
/// when it holds more than [`MAX_VALUES`] values or more than twice its
/// size plus [`ALIAS_SLACK`], expands to more scalar text than twice its
/// size plus [`EXPANSION_SLACK`], or nests deeper than
/// [`MAX_DEPTH`]. Syntax errors are left to the typed parse, which reports
/// them better. Takes time in the values walked, at most the bound.
pub(crate) fn check(source: &str) -> Result<(), Refused> {
    let budget = Budget {
        values: Cell::new(0),
        max_values: source
            .len()
            .saturating_mul(2)
            .saturating_add(ALIAS_SLACK)
            .min(MAX_VALUES),
        bytes: Cell::new(0),
        max_bytes: source
            .len()
            .saturating_mul(2)
            .saturating_add(EXPANSION_SLACK),
        over: Cell::new(None),
    };
    let walked = Walk {
        budget: &budget,
        depth: 0,
    }
    .deserialize(serde_yaml_ng::Deserializer::from_str(source));
    match (budget.over.take(), walked) {
        (Some(message), Err(e)) => {
            let location = e.location();
            Err(Refused {
                message,
                line: location.as_ref().map(|l| l.line()),
                column: location.as_ref().map(|l| l.column()),
            })
        }
        // A syntax error, or a document the walk could not take: the
        // typed parse says what is wrong.
        _ => Ok(()),
    }
}

struct Budget {
    values: Cell<usize>,
    max_values: usize,
    bytes: Cell<usize>,
    max_bytes: usize,
    /// Why the walk stopped, when it passed a bound (the parser's own
    /// error carries the place, not the reason).
    over: Cell<Option<String>>,
}

impl Budget {
    fn refuse<E: de::Error>(&self, message: String) -> E {
        let error = E::custom(&message);
        self.over.set(Some(message));
        error
    }

    fn value<E: de::Error>(&self) -> Result<(), E> {
        let values = self.values.get() + 1;
        self.values.set(values);
        if values > self.max_values {
            let bound = if self.max_values == MAX_VALUES {
                format!("{MAX_VALUES} values")
            } else {
                format!(
                    "{} values, twice its size plus {ALIAS_SLACK}",
                    self.max_values
                )
            };
            return Err(self.refuse(format!(
                "the document holds more than {bound} (a YAML alias counts what it repeats \
                 each time it is used)"
            )));
        }
        Ok(())
    }

    fn text<E: de::Error>(&self, len: usize) -> Result<(), E> {
        self.value()?;
        let bytes = self.bytes.get().saturating_add(len);
        self.bytes.set(bytes);
        if bytes > self.max_bytes {
            return Err(self.refuse(format!(
                "the document's text expands to more than {} bytes, twice its size plus \
                 {} KiB (a YAML alias counts what it repeats each time it is used)",
                self.max_bytes,
                EXPANSION_SLACK >> 10
            )));
        }
        Ok(())
    }
}

/// One value of the document, `depth` lists and maps deep.
#[derive(Clone, Copy)]
struct Walk<'b> {
    budget: &'b Budget,
    depth: usize,
}

impl Walk<'_> {
    fn inner<E: de::Error>(self) -> Result<Self, E> {
        if self.depth >= MAX_DEPTH {
            return Err(self.budget.refuse(format!(
                "lists and maps nest deeper than {MAX_DEPTH} levels"
            )));
        }
        Ok(Walk {
            budget: self.budget,
            depth: self.depth + 1,
        })
    }
}

impl<'de> DeserializeSeed<'de> for Walk<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Walk<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any value")
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        self.budget.value()
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        self.budget.value()
    }

    fn visit_i128<E: de::Error>(self, _: i128) -> Result<(), E> {
        self.budget.value()
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
        self.budget.value()
    }

    fn visit_u128<E: de::Error>(self, _: u128) -> Result<(), E> {
        self.budget.value()
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        self.budget.value()
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<(), E> {
        self.budget.text(text.len())
    }

    fn visit_bytes<E: de::Error>(self, bytes: &[u8]) -> Result<(), E> {
        self.budget.text(bytes.len())
    }

    fn visit_none<E: de::Error>(self) -> Result<(), E> {
        self.budget.value()
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        self.budget.value()
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }

    fn visit_newtype_struct<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        self.budget.value()?;
        let inner = self.inner()?;
        while seq.next_element_seed(inner)?.is_some() {}
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        self.budget.value()?;
        let inner = self.inner()?;
        while map.next_key_seed(inner)?.is_some() {
            map.next_value_seed(inner)?;
        }
        Ok(())
    }

    /// A tagged value (`!tag value`): the tag is text, the value is walked.
    fn visit_enum<A: EnumAccess<'de>>(self, data: A) -> Result<(), A::Error> {
        use serde::de::VariantAccess as _;
        let ((), variant) = data.variant_seed(self)?;
        variant.newtype_variant_seed(self.inner()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fmt::Write as _;

    /// `a` holds `width` zeros, and each next anchor `width` aliases of the
    /// one before: `width ^ levels` values from a few kilobytes.
    fn alias_bomb(width: usize, levels: usize) -> String {
        let mut text = String::from("a0: &a0 [");
        text.push_str(&vec!["0"; width].join(", "));
        text.push_str("]\n");
        for level in 1..levels {
            let aliases = vec![format!("*a{}", level - 1); width].join(", ");
            writeln!(text, "a{level}: &a{level} [{aliases}]").unwrap();
        }
        text
    }

    #[test]
    fn an_alias_bomb_is_refused_and_names_the_bound() {
        let text = alias_bomb(200, 4);
        assert!(text.len() < 10_000, "{} bytes", text.len());
        let refused = check(&text).unwrap_err();
        let bound = 2 * text.len() + ALIAS_SLACK;
        assert!(
            refused.message.contains(&format!(
                "more than {bound} values, twice its size plus {ALIAS_SLACK}"
            )),
            "{}",
            refused.message
        );
        assert!(refused.line.is_some());
        // Written out, as many values pass.
        let written = format!("a: [{}]\n", vec!["0"; bound / 2].join(","));
        check(&written).unwrap();
        // A large file is held to the fixed bound.
        let large = format!("a: [{}]\n", vec!["0"; MAX_VALUES].join(","));
        let refused = check(&large).unwrap_err();
        assert!(
            refused.message.contains("more than 250000 values ("),
            "{}",
            refused.message
        );
    }

    #[test]
    fn aliases_of_long_text_are_refused_by_its_size() {
        let long = "x".repeat(100_000);
        let aliases = vec!["*s"; 40].join(", ");
        let text = format!("s: &s {long}\nt: [{aliases}]\n");
        let refused = check(&text).unwrap_err();
        assert!(
            refused.message.contains("expands to more than"),
            "{}",
            refused.message
        );
    }

    #[test]
    fn deep_nesting_by_indentation_is_refused() {
        let mut text = String::new();
        for depth in 0..(MAX_DEPTH + 2) {
            writeln!(text, "{}k{depth}:", "  ".repeat(depth)).unwrap();
        }
        let refused = check(&text).unwrap_err();
        assert!(
            refused.message.contains("nest deeper than"),
            "{}",
            refused.message
        );
    }

    #[test]
    fn a_few_aliases_and_ordinary_documents_pass() {
        let text =
            "retry: &r {attempts: 3}\nsteps:\n  - {id: a, retry: *r}\n  - {id: b, retry: *r}\n";
        check(text).unwrap();
        check(&alias_bomb(20, 2)).unwrap();
        let nested = format!("{}{}", "[".repeat(MAX_DEPTH), "]".repeat(MAX_DEPTH));
        check(&nested).unwrap();
        // Syntax errors are the typed parse's to report.
        check("a: [").unwrap();
    }
}
