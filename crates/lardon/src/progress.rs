//! Progress, throughput and ETA of one task (DESIGN.md §9): a pure model.
