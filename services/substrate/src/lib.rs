//! The substrate: versioned, content-addressed, tenant-scoped definitions, served over gRPC.
