//! The table of MongoDB commands dbtap knows: the lower-case name events carry, the spelling
//! the text uses, whether the command's first value names a collection, and which of its
//! fields make up the query shape and how their values are shown.

/// How the values of a shape field are shown (see the module docs of [`super`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// A filter or an update document: every value becomes `?`; `$in`, `$nin` and `$all`
    /// arrays, and arrays holding only scalars, fold to one `?`.
    Values,
    /// Sort, projection, hint, index keys and option flags: numbers and booleans are kept
    /// (`1`, `-1`, `true`), anything else is `?`.
    Keep,
    /// An aggregation pipeline: as `Values`, but field paths (`"$field"`) are kept and the
    /// contents of a `$sort` stage are shown as `Keep`.
    Pipeline,
    /// An update: a document is shown as `Values`, an array (an update pipeline) as
    /// `Pipeline`.
    Update,
    /// Only its presence matters (`limit`, `skip`): always `?`.
    Opaque,
    /// A field name (distinct's `key`): a string is kept as it is.
    Name,
}

/// What a field of a command document is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Part of the shape, shown as the mode says.
    Shape(Mode),
    /// Write statements (`updates`, `deletes`): counted; the first one's `q`, `u` and flags
    /// make the shape.
    Statements,
    /// Documents (`documents` of insert): counted.
    Documents,
    /// Cursor ids (killCursors' `cursors`).
    CursorIds,
    /// The collection (getMore's `collection`).
    Collection,
}

/// A known command.
#[derive(Debug)]
pub struct Command {
    /// Lower case: [`crate::QueryEvent::command`].
    pub lower: &'static str,
    /// The spelling MongoDB documents, used in the text.
    pub name: &'static str,
    /// The first value of the command document names a collection.
    pub coll: bool,
    /// Fields with a role.
    pub fields: &'static [(&'static str, Role)],
}

use Mode::*;
use Role::*;

const FIND: &[(&str, Role)] = &[
    ("filter", Shape(Values)),
    ("sort", Shape(Keep)),
    ("projection", Shape(Keep)),
    ("hint", Shape(Keep)),
    ("limit", Shape(Opaque)),
    ("skip", Shape(Opaque)),
];
const STATEMENT: &[(&str, Role)] = &[
    ("q", Shape(Values)),
    ("u", Shape(Update)),
    ("multi", Shape(Keep)),
    ("upsert", Shape(Keep)),
    ("limit", Shape(Keep)),
    ("arrayFilters", Shape(Values)),
    ("hint", Shape(Keep)),
];

/// The fields of one update or delete statement that make the shape.
pub fn statement_field(key: &[u8]) -> Option<Mode> {
    STATEMENT.iter().find_map(|(k, r)| match r {
        Shape(m) if k.as_bytes() == key => Some(*m),
        _ => None,
    })
}

macro_rules! cmd {
    ($lower:literal, $name:literal) => {
        Command {
            lower: $lower,
            name: $name,
            coll: false,
            fields: &[],
        }
    };
    ($lower:literal, $name:literal, coll) => {
        Command {
            lower: $lower,
            name: $name,
            coll: true,
            fields: &[],
        }
    };
    ($lower:literal, $name:literal, $coll:literal, $fields:expr) => {
        Command {
            lower: $lower,
            name: $name,
            coll: $coll,
            fields: $fields,
        }
    };
}

/// Sorted by `lower` (checked by a test).
pub static COMMANDS: &[Command] = &[
    cmd!("aborttransaction", "abortTransaction"),
    cmd!("addshard", "addShard"),
    cmd!(
        "aggregate",
        "aggregate",
        true,
        &[("pipeline", Shape(Pipeline))]
    ),
    cmd!("analyze", "analyze", coll),
    cmd!("authenticate", "authenticate"),
    cmd!("balancerstatus", "balancerStatus"),
    cmd!("buildinfo", "buildInfo"),
    cmd!("bulkwrite", "bulkWrite"),
    cmd!("checkmetadataconsistency", "checkMetadataConsistency"),
    cmd!("cleanuporphaned", "cleanupOrphaned"),
    cmd!("clonecollectionascapped", "cloneCollectionAsCapped", coll),
    cmd!("collmod", "collMod", coll),
    cmd!("collstats", "collStats", coll),
    cmd!("committransaction", "commitTransaction"),
    cmd!("compact", "compact", coll),
    cmd!("connectionstatus", "connectionStatus"),
    cmd!("connpoolstats", "connPoolStats"),
    cmd!("converttocapped", "convertToCapped", coll),
    cmd!(
        "count",
        "count",
        true,
        &[
            ("query", Shape(Values)),
            ("hint", Shape(Keep)),
            ("limit", Shape(Opaque)),
            ("skip", Shape(Opaque)),
        ]
    ),
    cmd!("create", "create", coll),
    cmd!(
        "createindexes",
        "createIndexes",
        true,
        &[("indexes", Shape(Keep))]
    ),
    cmd!("createrole", "createRole"),
    cmd!("createsearchindexes", "createSearchIndexes", coll),
    cmd!("createuser", "createUser"),
    cmd!("currentop", "currentOp"),
    cmd!("datasize", "dataSize"),
    cmd!("dbhash", "dbHash"),
    cmd!("dbstats", "dbStats"),
    cmd!("delete", "delete", true, &[("deletes", Statements)]),
    cmd!(
        "distinct",
        "distinct",
        true,
        &[("key", Shape(Name)), ("query", Shape(Values))]
    ),
    cmd!("drop", "drop", coll),
    cmd!("dropallusersfromdatabase", "dropAllUsersFromDatabase"),
    cmd!("dropdatabase", "dropDatabase"),
    cmd!(
        "dropindexes",
        "dropIndexes",
        true,
        &[("index", Shape(Keep))]
    ),
    cmd!("droprole", "dropRole"),
    cmd!("dropsearchindex", "dropSearchIndex", coll),
    cmd!("dropuser", "dropUser"),
    cmd!("enablesharding", "enableSharding"),
    cmd!("endsessions", "endSessions"),
    cmd!("explain", "explain"),
    cmd!("features", "features"),
    cmd!("find", "find", true, FIND),
    cmd!(
        "findandmodify",
        "findAndModify",
        true,
        &[
            ("query", Shape(Values)),
            ("sort", Shape(Keep)),
            ("fields", Shape(Keep)),
            ("update", Shape(Update)),
            ("remove", Shape(Keep)),
            ("new", Shape(Keep)),
            ("upsert", Shape(Keep)),
            ("arrayFilters", Shape(Values)),
        ]
    ),
    cmd!("flushrouterconfig", "flushRouterConfig"),
    cmd!("fsync", "fsync"),
    cmd!("fsyncunlock", "fsyncUnlock"),
    cmd!("geosearch", "geoSearch", coll),
    cmd!("getcmdlineopts", "getCmdLineOpts"),
    cmd!("getdefaultrwconcern", "getDefaultRWConcern"),
    cmd!("getfreemonitoringstatus", "getFreeMonitoringStatus"),
    cmd!("getlasterror", "getLastError"),
    cmd!("getlog", "getLog"),
    cmd!("getmore", "getMore", false, &[("collection", Collection)]),
    cmd!("getnonce", "getnonce"),
    cmd!("getparameter", "getParameter"),
    cmd!("getshardmap", "getShardMap"),
    cmd!("grantrolestouser", "grantRolesToUser"),
    cmd!("hello", "hello"),
    cmd!("hostinfo", "hostInfo"),
    cmd!("insert", "insert", true, &[("documents", Documents)]),
    cmd!("ismaster", "isMaster"),
    cmd!("killallsessions", "killAllSessions"),
    cmd!(
        "killcursors",
        "killCursors",
        true,
        &[("cursors", CursorIds)]
    ),
    cmd!("killop", "killOp"),
    cmd!("killsessions", "killSessions"),
    cmd!(
        "listcollections",
        "listCollections",
        false,
        &[("filter", Shape(Values))]
    ),
    cmd!("listcommands", "listCommands"),
    cmd!(
        "listdatabases",
        "listDatabases",
        false,
        &[("filter", Shape(Values))]
    ),
    cmd!("listindexes", "listIndexes", coll),
    cmd!("listshards", "listShards"),
    cmd!("lockinfo", "lockInfo"),
    cmd!("logout", "logout"),
    cmd!("logrotate", "logRotate"),
    cmd!(
        "mapreduce",
        "mapReduce",
        true,
        &[("query", Shape(Values)), ("sort", Shape(Keep))]
    ),
    cmd!("movechunk", "moveChunk"),
    cmd!("ping", "ping"),
    cmd!("plancacheclear", "planCacheClear", coll),
    cmd!("plancacheclearfilters", "planCacheClearFilters", coll),
    cmd!("plancachelistfilters", "planCacheListFilters", coll),
    cmd!("plancachesetfilter", "planCacheSetFilter", coll),
    cmd!("profile", "profile"),
    cmd!("refreshsessions", "refreshSessions"),
    cmd!("reindex", "reIndex", coll),
    cmd!("renamecollection", "renameCollection"),
    cmd!("replsetgetconfig", "replSetGetConfig"),
    cmd!("replsetgetstatus", "replSetGetStatus"),
    cmd!("revokerolesfromuser", "revokeRolesFromUser"),
    cmd!("rolesinfo", "rolesInfo"),
    cmd!("saslcontinue", "saslContinue"),
    cmd!("saslstart", "saslStart"),
    cmd!("serverstatus", "serverStatus"),
    cmd!("setdefaultrwconcern", "setDefaultRWConcern"),
    cmd!(
        "setfeaturecompatibilityversion",
        "setFeatureCompatibilityVersion"
    ),
    cmd!("setparameter", "setParameter"),
    cmd!("shardcollection", "shardCollection"),
    cmd!("shutdown", "shutdown"),
    cmd!("split", "split"),
    cmd!("startsession", "startSession"),
    cmd!("top", "top"),
    cmd!("update", "update", true, &[("updates", Statements)]),
    cmd!("updaterole", "updateRole"),
    cmd!("updatesearchindex", "updateSearchIndex", coll),
    cmd!("updateuser", "updateUser"),
    cmd!("usersinfo", "usersInfo"),
    cmd!("validate", "validate", coll),
    cmd!("whatsmyuri", "whatsmyuri"),
];

/// The longest command name looked up (longer names are unknown).
const MAX_NAME: usize = 40;

/// Finds a command by name, ignoring ASCII case (`isMaster` and `ismaster` are one command).
pub fn lookup(name: &[u8]) -> Option<&'static Command> {
    if name.is_empty() || name.len() > MAX_NAME {
        return None;
    }
    let mut buf = [0u8; MAX_NAME];
    let lower = buf.get_mut(..name.len())?;
    lower.copy_from_slice(name);
    lower.make_ascii_lowercase();
    COMMANDS
        .binary_search_by(|c| c.lower.as_bytes().cmp(lower))
        .ok()
        .and_then(|i| COMMANDS.get(i))
}

impl Command {
    /// The role of a field of this command's document.
    pub fn role(&self, key: &[u8]) -> Option<Role> {
        self.fields
            .iter()
            .find_map(|(k, r)| (k.as_bytes() == key).then_some(*r))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_sorted_lower_case_and_unique() {
        for w in COMMANDS.windows(2) {
            assert!(w[0].lower < w[1].lower, "{} !< {}", w[0].lower, w[1].lower);
        }
        for c in COMMANDS {
            assert_eq!(c.lower, c.name.to_ascii_lowercase(), "{}", c.name);
            assert!(c.lower.len() <= MAX_NAME);
        }
    }

    #[test]
    fn lookup_ignores_case() {
        assert_eq!(lookup(b"isMaster").unwrap().lower, "ismaster");
        assert_eq!(lookup(b"ismaster").unwrap().name, "isMaster");
        assert_eq!(lookup(b"findAndModify").unwrap().lower, "findandmodify");
        assert!(lookup(b"find").unwrap().coll);
        assert!(!lookup(b"getMore").unwrap().coll);
        assert!(lookup(b"nope").is_none());
        assert!(lookup(b"").is_none());
        assert!(lookup(&[b'a'; 100]).is_none());
        let find = lookup(b"FIND").unwrap();
        assert_eq!(find.role(b"filter"), Some(Role::Shape(Mode::Values)));
        assert_eq!(find.role(b"batchSize"), None);
        assert_eq!(statement_field(b"u"), Some(Mode::Update));
        assert_eq!(statement_field(b"c"), None);
    }
}
