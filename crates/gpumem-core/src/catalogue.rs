//! GPU catalogue (placeholder; being written).
