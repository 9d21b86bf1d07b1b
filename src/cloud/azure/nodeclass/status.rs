//! The AKSNodeClass status from what was found out about the class (pure): `kubernetesVersion`,
//! `images`, and the conditions KubernetesVersionReady, ImagesReady, SubnetsReady, ValidationSucceeded
//! (the node bootstrap can serve the class: e.g. not local DNS `Required`) and Ready, which is True only
//! when the others are (upstream operatorpkg's root condition: otherwise False with
//! reason `UnhealthyDependents` and the failing types as message, e.g. `SubnetsReady=False`).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::json;

use crate::apis::aksnodeclass::NodeImage;
use crate::apis::conditions::{self, ConditionStatus};
use crate::apis::AKSNodeClass;
use crate::cloud::azure::bootstrap::{class_problem, NodeClassBootstrap};
use crate::cloud::ImageUpgrades;

/// What image resolution found.
#[derive(Debug, Clone, PartialEq)]
pub enum ImagesCheck {
    /// The class's images in priority order.
    Resolved(Vec<NodeImage>),
    /// No usable set of images. `keep` leaves the images already in the status in place (a failed
    /// lookup); otherwise they are cleared (the class asks for images that cannot exist, e.g. FIPS).
    Unresolved { reason: &'static str, message: String, keep: bool },
}

/// What the subnet check found.
#[derive(Debug, Clone, PartialEq)]
pub enum SubnetCheck {
    Ready,
    NotReady { reason: &'static str, message: String },
}

/// The images to write when `found` was resolved: all of `found` while upgrades are allowed or the class
/// has no ready images yet (a new class, or a Kubernetes upgrade, which clears ImagesReady); otherwise,
/// outside the maintenance window, an image the class already has keeps its version and only images of
/// a new definition (a changed image family, a newly supported size) come in at theirs, in `found`'s
/// order (upstream provider `pkg/controllers/nodeclass/status/images.go`
/// `overrideAnyGoalStateVersionsWithExisting`).
pub fn hold_versions(class: &AKSNodeClass, found: Vec<NodeImage>, upgrades: ImageUpgrades) -> Vec<NodeImage> {
    let status = class.status.as_ref();
    let images_ready = status.is_some_and(|s| conditions::is_true(&s.conditions, conditions::IMAGES_READY));
    if upgrades == ImageUpgrades::Allowed || !images_ready {
        return found;
    }
    let existing = status.map(|s| s.images.as_slice()).unwrap_or_default();
    found
        .into_iter()
        .map(|image| {
            let base = without_version(&image.id);
            existing.iter().find(|e| without_version(&e.id) == base).cloned().unwrap_or(image)
        })
        .collect()
}

/// An image ID without its `/versions/<version>` suffix.
fn without_version(id: &str) -> &str {
    id.rsplit_once("/versions/").map_or(id, |(base, _)| base)
}

/// The condition written while the controller's Azure credentials keep failing (ours: there is nothing
/// to launch with, and the cause belongs where users look first). It is absent while they work.
pub use conditions::CREDENTIALS_READY;

/// The status to write, or None when what is stored is already right.
pub fn nodeclass_status(
    class: &AKSNodeClass,
    version: &str,
    images: &ImagesCheck,
    subnet: &SubnetCheck,
    now: &Time,
) -> Option<serde_json::Value> {
    nodeclass_status_with(class, version, images, subnet, None, now)
}

/// [`nodeclass_status`] with the credentials' failure, when they keep failing: `CredentialsReady=False`
/// with it as the message, and the class not Ready.
pub fn nodeclass_status_with(
    class: &AKSNodeClass,
    version: &str,
    images: &ImagesCheck,
    subnet: &SubnetCheck,
    credentials_failing: Option<&str>,
    now: &Time,
) -> Option<serde_json::Value> {
    let current = class.status.clone().unwrap_or_default();
    let generation = class.metadata.generation;
    let mut list = current.conditions.clone();
    let set = |list: &mut Vec<_>, type_: &str, status: ConditionStatus, reason: &str, message: &str| {
        conditions::set(list, type_, status, reason, message, generation, now)
    };
    let (t, f) = (ConditionStatus::True, ConditionStatus::False);
    let mut changed = set(&mut list, conditions::KUBERNETES_VERSION_READY, t, "KubernetesVersionReady", "");
    let new_images = match images {
        ImagesCheck::Resolved(images) => {
            changed |= set(&mut list, conditions::IMAGES_READY, t, "ImagesReady", "");
            images.clone()
        }
        ImagesCheck::Unresolved { reason, message, keep } => {
            changed |= set(&mut list, conditions::IMAGES_READY, f, reason, message);
            if *keep {
                current.images.clone()
            } else {
                Vec::new()
            }
        }
    };
    changed |= match subnet {
        SubnetCheck::Ready => set(&mut list, conditions::SUBNETS_READY, t, "SubnetsReady", ""),
        SubnetCheck::NotReady { reason, message } => {
            set(&mut list, conditions::SUBNETS_READY, f, reason, message)
        }
    };
    changed |= match class_problem(&NodeClassBootstrap::from_class(class)) {
        None => set(&mut list, conditions::VALIDATION_SUCCEEDED, t, "ValidationSucceeded", ""),
        Some(problem) => {
            set(&mut list, conditions::VALIDATION_SUCCEEDED, f, problem.category(), &problem.to_string())
        }
    };
    changed |= match credentials_failing {
        Some(why) => set(&mut list, CREDENTIALS_READY, f, "CredentialsUnavailable", why),
        None => {
            let before = list.len();
            list.retain(|c| c.type_ != CREDENTIALS_READY);
            list.len() != before
        }
    };
    let present = |type_: &&str| *type_ != CREDENTIALS_READY || conditions::get(&list, type_).is_some();
    let unhealthy: Vec<String> = [
        conditions::KUBERNETES_VERSION_READY,
        conditions::IMAGES_READY,
        conditions::SUBNETS_READY,
        conditions::VALIDATION_SUCCEEDED,
        CREDENTIALS_READY,
    ]
    .into_iter()
    .filter(present)
    .filter(|type_| !conditions::is_true(&list, type_))
    .map(|type_| format!("{type_}=False"))
    .collect();
    changed |= if unhealthy.is_empty() {
        set(&mut list, conditions::READY, t, "Ready", "")
    } else {
        set(&mut list, conditions::READY, f, "UnhealthyDependents", &unhealthy.join(", "))
    };
    changed |= current.kubernetes_version.as_deref() != Some(version) || current.images != new_images;
    changed.then(|| json!({ "kubernetesVersion": version, "images": new_images, "conditions": list }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apis::aksnodeclass::AKSNodeClassStatus;
    use crate::apis::conditions::Condition;
    use crate::cloud::azure::imagefamily::{distro_definitions, node_image, Distro};

    fn class() -> AKSNodeClass {
        let mut class: AKSNodeClass = serde_yaml::from_str(
            "apiVersion: karpenter.azure.com/v1beta1\nkind: AKSNodeClass\nmetadata: {name: c, generation: 3}\nspec: {}\n",
        )
        .unwrap();
        class.status = Some(AKSNodeClassStatus::default());
        class
    }

    fn now() -> Time {
        serde_json::from_value(json!("2025-06-01T00:00:00Z")).unwrap()
    }

    fn images(version: &str) -> Vec<NodeImage> {
        distro_definitions(Distro::Ubuntu2404).iter().map(|d| node_image(d, version)).collect()
    }

    /// Applies a computed status to the class, as the API server would.
    fn apply(class: &mut AKSNodeClass, status: serde_json::Value) {
        class.status = Some(serde_json::from_value(status).unwrap());
    }

    fn condition<'a>(class: &'a AKSNodeClass, type_: &str) -> &'a Condition {
        conditions::get(&class.status.as_ref().unwrap().conditions, type_).unwrap()
    }

    #[test]
    fn a_class_the_node_bootstrap_cannot_serve_is_not_ready_and_says_why() {
        let mut class: AKSNodeClass = serde_yaml::from_str(
            "apiVersion: karpenter.azure.com/v1beta1\nkind: AKSNodeClass\nmetadata: {name: c, generation: 1}\nspec: {localDNS: {mode: Required}}\n",
        )
        .unwrap();
        let resolved = ImagesCheck::Resolved(images("1"));
        let status = nodeclass_status(&class, "1.34.4", &resolved, &SubnetCheck::Ready, &now()).unwrap();
        apply(&mut class, status);
        let c = condition(&class, "ValidationSucceeded");
        assert_eq!((c.status, c.reason.as_str()), (ConditionStatus::False, "LocalDNSNotSupported"));
        assert!(c.message.contains("spec.localDNS.mode Required"), "{}", c.message);
        let ready = condition(&class, "Ready");
        assert_eq!(
            (ready.status, ready.message.as_str()),
            (ConditionStatus::False, "ValidationSucceeded=False")
        );
        // Preferred falls back to no local DNS on these nodes and is fine.
        class.spec.local_dns.as_mut().unwrap().mode = crate::apis::aksnodeclass::LocalDnsMode::Preferred;
        let status = nodeclass_status(&class, "1.34.4", &resolved, &SubnetCheck::Ready, &now()).unwrap();
        apply(&mut class, status);
        assert_eq!(condition(&class, "Ready").status, ConditionStatus::True);
    }

    #[test]
    fn outside_the_window_known_images_keep_their_versions_and_new_definitions_come_in() {
        let mut class = class();
        let image = |definition: &str, version: &str| NodeImage {
            id: format!("/CommunityGalleries/g/images/{definition}/versions/{version}"),
            requirements: vec![],
        };
        let found = vec![image("2404gen2containerd", "2"), image("2404arm64containerd", "2")];
        assert_eq!(hold_versions(&class, found.clone(), ImageUpgrades::Held), found, "a new class resolves");
        let resolved = ImagesCheck::Resolved(vec![image("2404gen2containerd", "1")]);
        let status = nodeclass_status(&class, "1.34.4", &resolved, &SubnetCheck::Ready, &now()).unwrap();
        apply(&mut class, status);
        let held = hold_versions(&class, found.clone(), ImageUpgrades::Held);
        assert_eq!(held, [image("2404gen2containerd", "1"), image("2404arm64containerd", "2")]);
        assert_eq!(hold_versions(&class, found.clone(), ImageUpgrades::Allowed), found, "inside the window");
    }

    #[test]
    fn ready_when_images_resolve_and_the_subnet_exists() {
        let mut class = class();
        let status = nodeclass_status(
            &class,
            "1.34.4",
            &ImagesCheck::Resolved(images("1")),
            &SubnetCheck::Ready,
            &now(),
        )
        .unwrap();
        apply(&mut class, status);
        let s = class.status.as_ref().unwrap();
        assert_eq!(s.kubernetes_version.as_deref(), Some("1.34.4"));
        assert_eq!(s.images, images("1"));
        for type_ in ["KubernetesVersionReady", "ImagesReady", "SubnetsReady", "ValidationSucceeded", "Ready"]
        {
            let c = condition(&class, type_);
            assert_eq!((c.status, c.observed_generation), (ConditionStatus::True, Some(3)), "{type_}");
        }
        // Nothing changed: nothing to write.
        let again = ImagesCheck::Resolved(images("1"));
        assert_eq!(nodeclass_status(&class, "1.34.4", &again, &SubnetCheck::Ready, &now()), None);
        // A newer image version is written.
        let newer = ImagesCheck::Resolved(images("2"));
        assert!(nodeclass_status(&class, "1.34.4", &newer, &SubnetCheck::Ready, &now()).is_some());
    }

    #[test]
    fn a_missing_subnet_makes_the_class_not_ready_with_the_reason() {
        let mut class = class();
        let missing =
            SubnetCheck::NotReady { reason: "SubnetNotFound", message: "subnet /x not found".into() };
        let status =
            nodeclass_status(&class, "1.34.4", &ImagesCheck::Resolved(images("1")), &missing, &now())
                .unwrap();
        apply(&mut class, status);
        let subnets = condition(&class, "SubnetsReady");
        assert_eq!(
            (subnets.status, subnets.reason.as_str(), subnets.message.as_str()),
            (ConditionStatus::False, "SubnetNotFound", "subnet /x not found")
        );
        let ready = condition(&class, "Ready");
        assert_eq!(
            (ready.status, ready.reason.as_str(), ready.message.as_str()),
            (ConditionStatus::False, "UnhealthyDependents", "SubnetsReady=False")
        );
        assert_eq!(condition(&class, "ImagesReady").status, ConditionStatus::True);
    }

    #[test]
    fn a_failed_lookup_keeps_the_images_and_an_impossible_family_clears_them() {
        let mut class = class();
        let ok = nodeclass_status(
            &class,
            "1.34.4",
            &ImagesCheck::Resolved(images("1")),
            &SubnetCheck::Ready,
            &now(),
        );
        apply(&mut class, ok.unwrap());
        let failed =
            ImagesCheck::Unresolved { reason: "ImagesNotFound", message: "no versions".into(), keep: true };
        let status = nodeclass_status(&class, "1.34.4", &failed, &SubnetCheck::Ready, &now()).unwrap();
        apply(&mut class, status);
        assert_eq!(class.status.as_ref().unwrap().images, images("1"));
        assert_eq!(condition(&class, "ImagesReady").reason, "ImagesNotFound");
        assert_eq!(condition(&class, "Ready").message, "ImagesReady=False");
        let fips =
            ImagesCheck::Unresolved { reason: "SIGRequiredForFIPS", message: "FIPS".into(), keep: false };
        let missing = SubnetCheck::NotReady { reason: "SubnetNotFound", message: "gone".into() };
        let status = nodeclass_status(&class, "1.34.4", &fips, &missing, &now()).unwrap();
        apply(&mut class, status);
        assert!(class.status.as_ref().unwrap().images.is_empty());
        assert_eq!(condition(&class, "Ready").message, "ImagesReady=False, SubnetsReady=False");
    }

    #[test]
    fn failing_credentials_make_the_class_not_ready_with_the_cause_until_they_work() {
        let mut class = class();
        let resolved = ImagesCheck::Resolved(images("1"));
        let failing = "the instance metadata service refused a token (400): Identity not found";
        let status =
            nodeclass_status_with(&class, "1.34.4", &resolved, &SubnetCheck::Ready, Some(failing), &now())
                .unwrap();
        apply(&mut class, status);
        let credentials = condition(&class, CREDENTIALS_READY);
        assert_eq!((credentials.status, credentials.message.as_str()), (ConditionStatus::False, failing));
        let ready = condition(&class, "Ready");
        assert_eq!(
            (ready.status, ready.message.as_str()),
            (ConditionStatus::False, "CredentialsReady=False")
        );
        let status = nodeclass_status(&class, "1.34.4", &resolved, &SubnetCheck::Ready, &now()).unwrap();
        apply(&mut class, status);
        let conditions = &class.status.as_ref().unwrap().conditions;
        assert!(conditions.iter().all(|c| c.type_ != CREDENTIALS_READY), "gone once they work");
        assert_eq!(condition(&class, "Ready").status, ConditionStatus::True);
    }
}
