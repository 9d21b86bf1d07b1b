//! Between the API's node selector requirements (NodePool template, NodeClaim spec) and the model's
//! requirements algebra. The algebra sits below the API types, so the conversion lives on this side.

use crate::apis::NodeSelectorRequirementWithMinValues;
use crate::model::requirements::{Requirement, RequirementError, Requirements};

/// Requirements from the API form (NodePool template, NodeClaim spec).
pub fn from_api(list: &[NodeSelectorRequirementWithMinValues]) -> Result<Requirements, RequirementError> {
    let mut out = Requirements::new();
    for r in list {
        let min_values = r.min_values.and_then(|m| u32::try_from(m).ok());
        out.add(Requirement::from_operator(&r.key, r.operator, &r.values, min_values)?);
    }
    Ok(out)
}

/// The API form of one requirement: the operator form closest to its set of values.
pub fn requirement_to_api(requirement: &Requirement) -> Vec<NodeSelectorRequirementWithMinValues> {
    let min_values = requirement.min_values().map(|m| m as i32);
    requirement
        .operator_form()
        .into_iter()
        .map(|(operator, values)| NodeSelectorRequirementWithMinValues {
            key: requirement.key().to_string(),
            operator,
            values,
            min_values,
        })
        .collect()
}

/// The API form, one or more entries per key, sorted by key.
pub fn to_api(requirements: &Requirements) -> Vec<NodeSelectorRequirementWithMinValues> {
    requirements.iter().flat_map(requirement_to_api).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_round_trip_keeps_meaning() {
        let mut original = Requirements::new();
        for r in [
            Requirement::is_in("a", ["x", "y"]),
            Requirement::not_in("b", ["z"]),
            Requirement::exists("c"),
            Requirement::does_not_exist("d"),
            Requirement::greater_than("e", 3).intersect(&Requirement::less_than("e", 9)),
            Requirement::not_in("f", ["q"]).intersect(&Requirement::exists("f")),
        ] {
            original.add(r);
        }
        let back = from_api(&to_api(&original)).unwrap();
        for value in [None, Some("x"), Some("z"), Some("q"), Some("5"), Some("10")] {
            for r in original.iter() {
                assert_eq!(r.admits(value), back.get(r.key()).unwrap().admits(value), "{r} vs {value:?}");
            }
        }
    }
}
