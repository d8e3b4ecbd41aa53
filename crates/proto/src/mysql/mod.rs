//! MySQL/MariaDB client/server protocol.
