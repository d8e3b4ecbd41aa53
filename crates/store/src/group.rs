//! `group`: one group over a range.

use crate::answer::GroupAnswer;
use crate::{Error, GroupQuery, Store};

impl Store {
    /// One group over a range: summary, series, heatmap, distribution, errors, examples, dims.
    pub fn group(&self, _q: &GroupQuery) -> Result<GroupAnswer, Error> {
        Err(Error::Invalid("group: not implemented yet".into()))
    }
}
