//! `side`: a range of the store as one side of `dbtap diff`.

use crate::{Error, RangeQuery, Store};

impl Store {
    /// A range as one side of `dbtap diff`.
    pub fn side(&self, _q: &RangeQuery, _label: &str) -> Result<diff::Side, Error> {
        Err(Error::Invalid("side: not implemented yet".into()))
    }
}
