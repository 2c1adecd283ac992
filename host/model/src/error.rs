//! Why a definition is refused, and where: the file, line, column and
//! step a message names.
use std::fmt;
use std::path::PathBuf;

/// Why a workflow definition cannot be used. Each error names where it was
/// found: the file, the line and column when known, and the step.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DefinitionError {
    /// The file could not be read.
    #[error("cannot read workflow file {}: {message}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The operating system's reason.
        message: String,
    },
    /// The file is not well-formed, or does not follow the workflow format.
    #[error("{at}: {message}")]
    Invalid {
        /// Where the problem is.
        at: Location,
        /// What is wrong.
        message: String,
    },
}

impl DefinitionError {
    pub(crate) fn invalid(at: Location, message: impl Into<String>) -> Self {
        Self::Invalid {
            at,
            message: message.into(),
        }
    }
}

/// A place in a workflow definition.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Location {
    /// The file, or another name for the source.
    pub origin: String,
    /// 1-based line, when known.
    pub line: Option<usize>,
    /// 1-based column, when known.
    pub column: Option<usize>,
    /// The step the problem belongs to.
    pub step: Option<String>,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.origin)?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
            if let Some(column) = self.column {
                write!(f, ":{column}")?;
            }
        }
        if let Some(step) = &self.step {
            write!(f, ": step `{step}`")?;
        }
        Ok(())
    }
}
