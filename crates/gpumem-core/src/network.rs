//! Expected allocations of the agent's measurement network (placeholder; being written).
