//! Tests of the disruption decisions.
