//! Redis command fingerprints: the command with its subcommand, optionally the key pattern.
