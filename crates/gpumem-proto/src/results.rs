//! The measurement results file (placeholder; being written).
