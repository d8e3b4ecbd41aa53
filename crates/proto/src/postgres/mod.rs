//! PostgreSQL frontend/backend protocol (v3).
