//! Redis serialization protocol (RESP2, RESP3, inline commands).
