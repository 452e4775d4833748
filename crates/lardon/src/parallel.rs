//! Deterministic scoped parallel map for use inside a task (DESIGN.md §8).
