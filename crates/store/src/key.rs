//! A group's identity as the history store keys its series: the fingerprint hash and the
//! dimension values as text ("" when absent). The ClickHouse sink keys its rows the same way.

use aggregate::Group;

/// FNV-1a of the fingerprint text: the stored fingerprint hash (stable across builds).
pub fn fp_hash(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

/// A group's dimension values as the store keeps them ("" when unknown).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DimText {
    /// The server endpoint.
    pub server: String,
    /// The client host.
    pub client: String,
    pub db: String,
    pub user: String,
}

impl DimText {
    /// The dimension values of `g` ("" for each one it does not have).
    pub fn of(g: &Group) -> DimText {
        let d = g.dims.as_deref();
        DimText {
            server: d
                .and_then(|d| d.server.as_ref())
                .map(|s| s.to_string())
                .unwrap_or_default(),
            client: d
                .and_then(|d| d.client)
                .map(|c| c.to_string())
                .unwrap_or_default(),
            db: d
                .and_then(|d| d.database.as_deref())
                .unwrap_or("")
                .to_string(),
            user: d.and_then(|d| d.user.as_deref()).unwrap_or("").to_string(),
        }
    }
}
