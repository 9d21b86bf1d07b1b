//! The API server enforces the CRDs' validation: every case of `validation_cases` is submitted as a
//! dry-run create (all validation and admission run, nothing is stored, so cases cannot collide), and a
//! NodeClaim's spec cannot be changed once created.
//!
//! A test runs its whole table before failing and lists every case that went wrong with what the API
//! server said, so one run shows all broken rules at once.

use serde_json::json;

use super::crds::{self, AKSNODECLASSES, NODECLAIMS, NODEOVERLAYS, NODEPOOLS};
use super::validation_cases::{self as cases, Case, Expect};
use super::{cluster, objects};

/// Submits every case and panics with the list of those whose outcome differs from the expectation.
async fn check(client: &kube::Client, cases: Vec<Case>) {
    let mut wrong = Vec::new();
    let total = cases.len();
    for case in cases {
        let outcome = objects::refusal(objects::create(client, &case.object, true).await);
        match (&case.expect, outcome) {
            (Expect::Refused(wanted), Ok(message)) if message.contains(wanted) => {}
            (Expect::Refused(wanted), Ok(message)) => {
                wrong.push(format!("{}: refused, but the message lacks {wanted:?}: {message}", case.name))
            }
            (Expect::Refused(_), Err(what)) => {
                wrong.push(format!("{}: expected a refusal, got: {what}", case.name))
            }
            (Expect::Accepted, Err(what)) if what == "accepted" => {}
            (Expect::Accepted, Ok(message)) => {
                wrong.push(format!("{}: valid but refused: {message}", case.name))
            }
            (Expect::Accepted, Err(what)) => wrong.push(format!("{}: {what}", case.name)),
        }
    }
    assert!(wrong.is_empty(), "{} of {total} cases went wrong:\n{}", wrong.len(), wrong.join("\n"));
}

#[tokio::test]
async fn restricted_label_domains_are_refused_in_requirements_and_template_labels() {
    let client = cluster::shared().client().await;
    crds::ensure_installed(&client, &[NODEPOOLS, NODECLAIMS]).await;
    check(&client, cases::label_domain_cases()).await;
}

#[tokio::test]
async fn invalid_nodepools_are_refused_with_the_rule_that_failed() {
    let client = cluster::shared().client().await;
    crds::ensure_installed(&client, &[NODEPOOLS]).await;
    check(&client, cases::nodepool_cases()).await;
}

#[tokio::test]
async fn invalid_aksnodeclasses_are_refused_with_the_rule_that_failed() {
    let client = cluster::shared().client().await;
    crds::ensure_installed(&client, &[AKSNODECLASSES]).await;
    check(&client, cases::aksnodeclass_cases()).await;
}

#[tokio::test]
async fn invalid_nodeoverlays_are_refused_with_upstreams_messages() {
    let client = cluster::shared().client().await;
    crds::ensure_installed(&client, &[NODEOVERLAYS]).await;
    check(&client, cases::nodeoverlay_cases()).await;
}

#[tokio::test]
async fn a_nodeclaim_spec_is_immutable_but_its_metadata_is_not() {
    let client = cluster::shared().client().await;
    crds::ensure_installed(&client, &[NODECLAIMS]).await;
    let claim = cases::claim("e2e-immutable", json!({}));
    let stored =
        serde_json::to_value(objects::create(&client, &claim, false).await.expect("NodeClaim created"))
            .unwrap();

    // Merge patches carry no resourceVersion: a running controller may update this claim at the
    // same time (it manages every NodeClaim), and a stale replace would fail with a conflict.
    let mut requirements = stored["spec"]["requirements"].clone();
    requirements[0]["values"] = json!(["Standard_D4s_v5"]);
    let spec_change = json!({"spec": {"requirements": requirements}});
    let message = objects::refusal(objects::merge_patch(&client, &stored, &spec_change).await)
        .expect("a spec change is refused");
    assert!(message.contains("spec is immutable"), "{message}");

    let relabel = json!({"metadata": {"labels": {"example.com/touched": "yes"}}});
    objects::merge_patch(&client, &stored, &relabel).await.expect("a metadata change is accepted");
    // A claim that never launches (its class does not exist) would hold every controller's
    // provisioning at the synced gate until its launch timeout.
    let api = objects::api_for(&client, &claim).await.expect("the NodeClaim API");
    api.delete("e2e-immutable", &Default::default()).await.expect("deleting the NodeClaim");
}

#[tokio::test]
async fn a_nodepool_cannot_switch_between_static_and_dynamic() {
    let client = cluster::shared().client().await;
    crds::ensure_installed(&client, &[NODEPOOLS]).await;
    let message = "Cannot transition NodePool between static (replicas set) and dynamic (replicas unset) provisioning modes";
    // Their class does not exist, so no controller of a parallel test launches anything for them.
    let fixed =
        cases::merged(cases::pool(json!({"replicas": 1})), json!({"metadata": {"name": "e2e-static-mode"}}));
    let fixed = serde_json::to_value(objects::apply(&client, &fixed).await.expect("static pool")).unwrap();
    let unset = objects::merge_patch(&client, &fixed, &json!({"spec": {"replicas": null}})).await;
    let refusal = objects::refusal(unset).expect("dropping replicas is refused");
    assert!(refusal.contains(message), "{refusal}");
    objects::merge_patch(&client, &fixed, &json!({"spec": {"replicas": 3}}))
        .await
        .expect("changing replicas");

    let dynamic = cases::merged(cases::pool(json!({})), json!({"metadata": {"name": "e2e-dynamic-mode"}}));
    let dynamic = serde_json::to_value(objects::apply(&client, &dynamic).await.expect("pool")).unwrap();
    let set = objects::merge_patch(&client, &dynamic, &json!({"spec": {"replicas": 2}})).await;
    let refusal = objects::refusal(set).expect("setting replicas is refused");
    assert!(refusal.contains(message), "{refusal}");
    for pool in [&fixed, &dynamic] {
        let name = pool["metadata"]["name"].as_str().unwrap();
        let api = objects::api_for(&client, pool).await.expect("the NodePool API");
        api.delete(name, &Default::default()).await.expect("deleting the pool");
    }
}
