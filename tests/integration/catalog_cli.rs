//! The `karpenter-azure catalog` command end to end: hand-checked allocatable values, NodePool
//! filtering, and one-line errors with exit code 2 for bad input.

use std::process::Output;

use crate::support::cli::run;

fn catalog(args: &[&str]) -> Output {
    run(&[&["catalog"], args].concat())
}

fn json_rows(args: &[&str]) -> Vec<serde_json::Value> {
    let out = catalog(&[args, &["--output", "json"]].concat());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("json output")
}

fn row<'a>(rows: &'a [serde_json::Value], name: &str) -> &'a serde_json::Value {
    rows.iter().find(|r| r["name"] == name).unwrap_or_else(|| panic!("{name} not listed"))
}

#[test]
fn offline_listings_warn_about_spot_and_fallback_prices() {
    let out = catalog(&["--region", "eastus", "--output", "json"]);
    assert!(out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.starts_with("warning: ") && stderr.contains("spot is priced as on-demand"), "{stderr}");
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).expect("stdout stays JSON");
    assert_eq!(row(&rows, "Standard_D4s_v5")["spot_price"], row(&rows, "Standard_D4s_v5")["on_demand_price"]);
    // Every real Azure region works, at eastus's prices and with a line that says so.
    let out = catalog(&["--region", "swedencentral"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().filter(|l| l.starts_with("warning: ")).count(), 2, "{stderr}");
    assert!(stderr.contains("eastus's static prices"), "{stderr}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.lines().any(|l| l.starts_with("Standard_D4s_v5 ") && l.contains("swedencentral-1")),
        "{text}"
    );
}

#[test]
fn d4s_v5_in_eastus_has_3860m_allocatable_cpu() {
    let out = catalog(&["--region", "eastus"]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let line = text.lines().find(|l| l.starts_with("Standard_D4s_v5 ")).expect("D4s_v5 row");
    assert!(line.contains("3860m"), "{line}");
}

#[test]
fn allocatable_checked_by_hand() {
    let rows = json_rows(&["--region", "eastus"]);
    // (size, cpu, memory): cpu = vCPU·1000 − (60 + 40 + 20·min(2, n−2) + 10·(n−4)); memory =
    // floor(GiB)Gi − ceil(7.5 %) − kube-reserved brackets (truncated to MiB) − 750Mi, printed in Ki.
    for (size, cpu) in [
        ("Standard_D2s_v5", "1900m"),
        ("Standard_D4s_v5", "3860m"),
        ("Standard_D8s_v5", "7820m"),
        ("Standard_E16s_v5", "15740m"),
    ] {
        assert_eq!(row(&rows, size)["allocatable"]["cpu"], cpu, "{size}");
    }
    // D4s_v5: 16Gi − 1288490189 − 2662Mi − 750Mi = 12313637683 bytes.
    let memory = row(&rows, "Standard_D4s_v5")["allocatable"]["memory"].as_str().unwrap().to_string();
    let bytes = karpenter_azure::model::resources::parse_resource_quantity("memory", &memory).unwrap();
    assert!((12313637683 - bytes).abs() < 1024, "{memory}");
    assert_eq!(row(&rows, "Standard_D4s_v5")["allocatable"]["pods"], "250");
}

#[test]
fn nodepool_requirements_filter_sizes_and_offerings() {
    let dir = tempfile::tempdir().unwrap();
    let pool = dir.path().join("pool.yaml");
    std::fs::write(
        &pool,
        r#"apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: arm}
spec:
  template:
    spec:
      nodeClassRef: {name: default}
      requirements:
        - {key: kubernetes.io/arch, operator: In, values: [arm64]}
        - {key: karpenter.azure.com/sku-cpu, operator: Lt, values: ["9"]}
        - {key: topology.kubernetes.io/zone, operator: In, values: [eastus-2]}
"#,
    )
    .unwrap();
    let rows = json_rows(&["--region", "eastus", "--nodepool", pool.to_str().unwrap()]);
    assert!(!rows.is_empty());
    for r in &rows {
        assert_eq!(r["arch"], "arm64", "{}", r["name"]);
        assert!(r["vcpus"].as_u64().unwrap() < 9, "{}", r["name"]);
        assert_eq!(r["zones"], serde_json::json!(["eastus-2"]), "{}", r["name"]);
    }
}

#[test]
fn bad_input_is_one_line_with_exit_code_2() {
    let dir = tempfile::tempdir().unwrap();
    let bad_pool = dir.path().join("bad.yaml");
    std::fs::write(
        &bad_pool,
        "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: bad}\nspec:\n  template:\n    spec:\n      nodeClassRef: {name: default}\n      requirements:\n        - {key: kubernetes.io/hostname, operator: In, values: [a]}\n",
    )
    .unwrap();
    let not_a_pool = dir.path().join("typo.yaml");
    std::fs::write(&not_a_pool, "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: t}\nspec:\n  template:\n    spec:\n      nodeClassRef: {name: default}\n      requirements:\n        - {key: a, operator: Inn, values: [a]}\n").unwrap();
    let cases: Vec<(Vec<String>, &str)> = vec![
        (vec!["--region".into(), "mars".into()], "unknown region \"mars\""),
        (vec!["--bogus".into()], "--bogus"),
        (vec!["--nodepool".into(), bad_pool.display().to_string()], "requirements[0].key"),
        (
            vec!["--nodepool".into(), not_a_pool.display().to_string()],
            "spec.template.spec.requirements[0].operator",
        ),
        (vec!["--nodepool".into(), "examples/aksnodeclass-default.yaml".into()], "expected one NodePool"),
        (vec!["--nodepool".into(), "no/such/file.yaml".into()], "no/such/file.yaml"),
    ];
    for (args, expected) in cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = catalog(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert_eq!(stderr.trim_end().lines().count(), 1, "{args:?}: {stderr}");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
        assert!(out.stdout.is_empty(), "{args:?} printed partial output");
    }
}

#[test]
fn sizes_a_class_cannot_run_are_left_out_and_listed_with_the_reason() {
    let dir = std::env::temp_dir().join(format!("karpenter-azure-left-out-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let class = dir.join("class.yaml");
    std::fs::write(
        &class,
        "apiVersion: karpenter.azure.com/v1beta1\nkind: AKSNodeClass\nmetadata: {name: c}\n\
         spec: {imageFamily: Ubuntu, artifactStreaming: {enabled: true}}\n",
    )
    .unwrap();
    let class = class.to_str().unwrap();
    let offered = json_rows(&["--nodeclass", class]);
    let names: Vec<&str> = offered.iter().map(|r| r["name"].as_str().unwrap()).collect();
    for gone in
        ["Standard_NCC40ads_H100_v5", "Standard_NG32ads_V620_v1", "Standard_NV32as_v4", "Standard_D2ps_v5"]
    {
        assert!(!names.contains(&gone), "{gone} is offered");
    }
    assert!(names.contains(&"Standard_D2s_v5") && names.contains(&"Standard_NC24ads_A100_v4"));

    let left_out = json_rows(&["--nodeclass", class, "--left-out"]);
    let reason = |name: &str| row(&left_out, name)["reason"].as_str().unwrap().to_string();
    assert!(reason("Standard_NCC40ads_H100_v5").contains("GPU is not one AKS supports"));
    assert!(reason("Standard_NV4ads_V710_v5").contains("no driver"));
    assert!(reason("Standard_D2ps_v5").contains("artifactStreaming"));
    assert!(left_out.iter().all(|r| r["name"] != "Standard_D2s_v5"));
    let _ = std::fs::remove_dir_all(&dir);
}
