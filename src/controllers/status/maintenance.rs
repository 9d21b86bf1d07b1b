//! The AKS node OS maintenance window, as AKS publishes it to the cluster: the ConfigMap
//! `upcoming-maintenance-window` in the system namespace, whose `aksManagedNodeOSUpgradeSchedule-start`
//! and `-end` keys (RFC 3339) bound the next window of the `aksManagedNodeOSUpgradeSchedule` channel
//! (upstream provider `pkg/controllers/nodeclass/status/images.go`). Node image versions move only
//! inside it. Without the ConfigMap, or without that channel in it, no window is configured and
//! upgrades are allowed at any time, as upstream fails open.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::jiff::Timestamp;
use kube::Api;

use crate::cloud::ImageUpgrades;

/// The ConfigMap AKS writes the upcoming maintenance windows to.
pub const CONFIGMAP: &str = "upcoming-maintenance-window";
/// The maintenance configuration channel of node OS image upgrades.
pub const NODE_OS_CHANNEL: &str = "aksManagedNodeOSUpgradeSchedule";

/// Whether image upgrades are allowed at `now` by the ConfigMap's `data`; `Err` when the window is
/// given but cannot be read (then upgrades are held, as upstream updates nothing on that error).
pub fn upgrades_at(data: &BTreeMap<String, String>, now: Timestamp) -> Result<ImageUpgrades, String> {
    let get = |suffix: &str| data.get(&format!("{NODE_OS_CHANNEL}-{suffix}")).filter(|v| !v.is_empty());
    let (start, end) = match (get("start"), get("end")) {
        (None, None) => return Ok(ImageUpgrades::Allowed),
        (Some(start), Some(end)) => (start, end),
        _ => return Err(format!("{CONFIGMAP} gives only one end of the {NODE_OS_CHANNEL} window")),
    };
    let parse = |key: &str, text: &str| {
        text.parse::<Timestamp>().map_err(|e| format!("{CONFIGMAP}: {NODE_OS_CHANNEL}-{key} {text:?}: {e}"))
    };
    let (start, end) = (parse("start", start)?, parse("end", end)?);
    Ok(if start < now && now < end { ImageUpgrades::Allowed } else { ImageUpgrades::Held })
}

/// Reads the ConfigMap from `namespace` and decides at `now`, with a problem worth logging: a window
/// that cannot be read (upgrades held), or a ConfigMap the controller may not read (upgrades allowed,
/// as without one).
pub async fn upgrades(
    client: &kube::Client,
    namespace: &str,
    now: Timestamp,
) -> (ImageUpgrades, Option<String>) {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    match api.get_opt(CONFIGMAP).await {
        Ok(None) => (ImageUpgrades::Allowed, None),
        Ok(Some(map)) => match upgrades_at(&map.data.unwrap_or_default(), now) {
            Ok(upgrades) => (upgrades, None),
            Err(why) => (ImageUpgrades::Held, Some(why)),
        },
        Err(e) => (
            ImageUpgrades::Allowed,
            Some(format!("reading {namespace}/{CONFIGMAP}: {e}; upgrades are not held")),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn upgrades_move_only_inside_a_configured_window() {
        let now: Timestamp = "2026-12-04T10:00:00Z".parse().unwrap();
        let window = |start: &str, end: &str| {
            data(&[
                ("aksManagedNodeOSUpgradeSchedule-start", start),
                ("aksManagedNodeOSUpgradeSchedule-end", end),
            ])
        };
        let cases = [
            (data(&[]), Ok(ImageUpgrades::Allowed)),
            (
                data(&[("aksManagedAutoUpgradeSchedule-start", "2026-12-05T00:00:00Z")]),
                Ok(ImageUpgrades::Allowed),
            ),
            (window("", ""), Ok(ImageUpgrades::Allowed)),
            (window("2026-12-04T09:00:00Z", "2026-12-04T13:00:00Z"), Ok(ImageUpgrades::Allowed)),
            (window("2026-12-05T09:00:00Z", "2026-12-05T13:00:00Z"), Ok(ImageUpgrades::Held)),
            (window("2026-12-03T09:00:00Z", "2026-12-03T13:00:00Z"), Ok(ImageUpgrades::Held)),
        ];
        for (data, want) in cases {
            assert_eq!(upgrades_at(&data, now), want, "{data:?}");
        }
        let half = data(&[("aksManagedNodeOSUpgradeSchedule-start", "2026-12-04T09:00:00Z")]);
        assert!(upgrades_at(&half, now).unwrap_err().contains("only one end"));
        assert!(upgrades_at(&window("tomorrow", "2026-12-04T13:00:00Z"), now).is_err());
    }
}
