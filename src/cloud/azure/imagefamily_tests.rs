//! Tests of the image-family table, the newest-version choice and which image each size boots.

use super::*;
use crate::apis::aksnodeclass::{Security, TrustedLaunch};
use crate::catalog::embedded_sku;

fn class(yaml_spec: &str) -> AKSNodeClass {
    serde_yaml::from_str(&format!(
        "apiVersion: karpenter.azure.com/v1beta1\nkind: AKSNodeClass\nmetadata: {{name: c}}\nspec: {yaml_spec}\n"
    ))
    .unwrap()
}

fn names(definitions: &[ImageDefinition]) -> Vec<&str> {
    definitions.iter().map(|d| d.definition).collect()
}

fn version(name: &str, published: Option<i64>) -> PublishedVersion {
    PublishedVersion { name: name.into(), published, exclude_from_latest: false }
}

#[test]
fn the_kubernetes_version_picks_the_distro() {
    use ImageFamily::{AzureLinux, Ubuntu};
    for (family, version, expected) in [
        (Ubuntu, "1.33.5", Distro::Ubuntu2204),
        (Ubuntu, "1.34.0", Distro::Ubuntu2404),
        (Ubuntu, "v1.35.1+k3s1", Distro::Ubuntu2404),
        (Ubuntu, "not-a-version", Distro::Ubuntu2204),
        (ImageFamily::Ubuntu2204, "1.35.0", Distro::Ubuntu2204),
        (ImageFamily::Ubuntu2404, "1.30.0", Distro::Ubuntu2404),
        (AzureLinux, "1.31.9", Distro::AzureLinux2),
        (AzureLinux, "1.32.0", Distro::AzureLinux3),
        (AzureLinux, "2.0.0", Distro::AzureLinux2),
    ] {
        assert_eq!(distro(family, version), expected, "{family:?} at {version}");
    }
}

#[test]
fn each_distro_has_gen2_gen1_and_arm64_definitions_in_that_order() {
    let ubuntu = distro_definitions(Distro::Ubuntu2404);
    assert_eq!(names(&ubuntu), ["2404gen2containerd", "2404containerd", "2404gen2arm64containerd"]);
    assert!(ubuntu.iter().all(|d| d.gallery == UBUNTU_GALLERY));
    let variants: Vec<(Arch, &str)> = ubuntu.iter().map(|d| (d.arch, d.hyperv_generation)).collect();
    assert_eq!(variants, [(Arch::Amd64, "2"), (Arch::Amd64, "1"), (Arch::Arm64, "2")]);
    assert_eq!(
        names(&distro_definitions(Distro::Ubuntu2204)),
        ["2204gen2containerd", "2204containerd", "2204gen2arm64containerd"]
    );
    let azl3 = distro_definitions(Distro::AzureLinux3);
    assert_eq!(names(&azl3), ["V3gen2", "V3", "V3gen2arm64"]);
    assert!(azl3.iter().all(|d| d.gallery == AZURE_LINUX_GALLERY));
    assert_eq!(names(&distro_definitions(Distro::AzureLinux2)), ["V2gen2", "V2", "V2gen2arm64"]);
}

#[test]
fn fips_classes_have_no_community_images() {
    assert_eq!(names(&class_definitions(&class("{}"), "1.33.0").unwrap())[0], "2204gen2containerd");
    assert_eq!(
        names(&class_definitions(&class("{imageFamily: AzureLinux}"), "1.34.0").unwrap())[0],
        "V3gen2"
    );
    let fips = class("{imageFamily: AzureLinux, fipsMode: FIPS}");
    assert_eq!(class_definitions(&fips, "1.34.0"), Err(ImageFamilyError::FipsRequiresSig));
    assert_eq!(ImageFamilyError::FipsRequiresSig.category(), "SIGRequiredForFIPS");
    let disabled = class("{fipsMode: Disabled}");
    assert!(class_definitions(&disabled, "1.34.0").is_ok());
}

#[test]
fn trusted_launch_classes_use_the_trusted_launch_definition_only() {
    let trusted = |family: &str, vtpm: Option<bool>, secure_boot: Option<bool>| {
        let mut c = class(family);
        c.spec.security = Some(Security {
            encryption_at_host: Some(true),
            trusted_launch: Some(TrustedLaunch { vtpm, secure_boot }),
        });
        c
    };
    for (family, version, expected) in [
        // The default family stays on 22.04 even where it would otherwise be 24.04 (upstream).
        ("{}", "1.34.0", "2204gen2TLcontainerd"),
        ("{imageFamily: Ubuntu2204}", "1.34.0", "2204gen2TLcontainerd"),
        ("{imageFamily: Ubuntu2404}", "1.30.0", "2404gen2TLcontainerd"),
        ("{imageFamily: AzureLinux}", "1.31.0", "V2gen2TL"),
        ("{imageFamily: AzureLinux}", "1.34.0", "V3gen2TL"),
    ] {
        let definitions = class_definitions(&trusted(family, Some(true), None), version).unwrap();
        assert_eq!(names(&definitions), [expected], "{family} at {version}");
        assert_eq!((definitions[0].arch, definitions[0].hyperv_generation), (Arch::Amd64, "2"));
    }
    let secure_boot_only = class_definitions(&trusted("{}", None, Some(true)), "1.33.0").unwrap();
    assert_eq!(names(&secure_boot_only), ["2204gen2TLcontainerd"]);
    let off = class_definitions(&trusted("{}", Some(false), Some(false)), "1.34.0").unwrap();
    assert_eq!(names(&off), ["2404gen2containerd", "2404containerd", "2404gen2arm64containerd"]);
    let fips = class_definitions(&trusted("{fipsMode: FIPS}", Some(true), None), "1.33.0");
    assert_eq!(fips, Err(ImageFamilyError::FipsRequiresSig), "FIPS + TL images are SIG-only too");
}

#[test]
fn the_newest_published_version_wins() {
    let versions = [
        version("202505.20.0", Some(1_747_699_200)),
        version("202506.02.0", Some(1_748_822_400)),
        version("202501.01.0", Some(1_735_689_600)),
    ];
    assert_eq!(newest(&versions).unwrap().name, "202506.02.0");
    // The publish date decides even against a higher version number (a re-published hotfix line).
    let hotfix = [version("202506.02.0", Some(100)), version("202505.20.1", Some(200))];
    assert_eq!(newest(&hotfix).unwrap().name, "202505.20.1");
    // Same date, or no dates at all: the version number, numerically.
    let same_day = [version("202506.9.0", Some(5)), version("202506.10.0", Some(5))];
    assert_eq!(newest(&same_day).unwrap().name, "202506.10.0");
    let undated = [version("2.10.0", None), version("2.9.9", None)];
    assert_eq!(newest(&undated).unwrap().name, "2.10.0");
    assert_eq!(newest(&[version("1.0.0", None), version("0.1.0", Some(1))]).unwrap().name, "0.1.0");
}

#[test]
fn versions_excluded_from_latest_are_skipped() {
    let mut excluded = version("202507.01.0", Some(9_999_999_999));
    excluded.exclude_from_latest = true;
    let versions = [excluded.clone(), version("202506.02.0", Some(1))];
    assert_eq!(newest(&versions).unwrap().name, "202506.02.0");
    assert_eq!(newest(&[excluded]), None);
    assert_eq!(newest(&[]), None);
}

#[test]
fn image_ids_round_trip() {
    let id = community_image_id(UBUNTU_GALLERY, "2404gen2containerd", "202506.02.0");
    assert_eq!(
        id,
        "/CommunityGalleries/AKSUbuntu-38d80f77-467a-481f-a8d4-09b6d4220bd2/images/2404gen2containerd/versions/202506.02.0"
    );
    assert_eq!(parse_community_image_id(&id), Some((UBUNTU_GALLERY, "2404gen2containerd", "202506.02.0")));
    assert_eq!(
        parse_community_image_id("/CommunityGalleries/g/Images/d/Versions/1"),
        Some(("g", "d", "1")),
        "ARM spells the segments either way"
    );
    assert_eq!(parse_community_image_id("/subscriptions/s/resourceGroups/r/providers/x"), None);
}

#[test]
fn node_images_carry_arch_and_generation_requirements() {
    let [gen2, gen1, arm64] = distro_definitions(Distro::Ubuntu2204);
    let image = node_image(&gen1, "202506.02.0");
    assert!(image.id.ends_with("/images/2204containerd/versions/202506.02.0"));
    let keys: Vec<(&str, &[String])> =
        image.requirements.iter().map(|r| (r.key.as_str(), r.values.as_slice())).collect();
    assert_eq!(
        keys,
        [
            ("kubernetes.io/arch", &["amd64".to_string()][..]),
            ("karpenter.azure.com/sku-hyperv-generation", &["1".to_string()][..])
        ]
    );
    assert_eq!(node_image(&gen2, "1").requirements[1].values, ["2"]);
    assert_eq!(node_image(&arm64, "1").requirements[0].values, ["arm64"]);
}

#[test]
fn each_size_gets_the_first_image_it_can_boot() {
    let images: Vec<NodeImage> =
        distro_definitions(Distro::Ubuntu2404).iter().map(|d| node_image(d, "202506.02.0")).collect();
    let chosen = |size: &str| {
        let sku = embedded_sku(size).unwrap_or_else(|| panic!("{size} in the catalog"));
        image_for(&images, sku).map(|i| parse_community_image_id(&i.id).unwrap().1)
    };
    // V1 and V2: gen2 comes first.
    assert_eq!(chosen("Standard_D2s_v5"), Some("2404gen2containerd"));
    // V1 only.
    assert_eq!(chosen("Standard_D2_v2"), Some("2404containerd"));
    // arm64, V2.
    assert_eq!(chosen("Standard_D2ps_v5"), Some("2404gen2arm64containerd"));
    // Generations not recorded: any generation of the right arch.
    assert_eq!(embedded_sku("Standard_B2ps_v2").unwrap().hyperv_generations, None);
    assert_eq!(chosen("Standard_B2ps_v2"), Some("2404gen2arm64containerd"));
    // Without an arm64 image an arm64 size has none.
    assert_eq!(image_for(&images[..2], embedded_sku("Standard_D2ps_v5").unwrap()), None);
    // Without a gen1 image a V1-only size has none.
    let gen2_only = [images[0].clone(), images[2].clone()];
    assert_eq!(image_for(&gen2_only, embedded_sku("Standard_D2_v2").unwrap()), None);
}

#[test]
fn requirements_on_labels_sizes_lack_do_not_match() {
    let mut image = node_image(&distro_definitions(Distro::Ubuntu2404)[0], "1");
    image.requirements.push(NodeSelectorRequirementWithMinValues {
        key: "example.com/accelerator".into(),
        operator: Operator::In,
        values: vec!["x".into()],
        min_values: None,
    });
    assert_eq!(image_for(std::slice::from_ref(&image), embedded_sku("Standard_D2s_v5").unwrap()), None);
    image.requirements.last_mut().unwrap().operator = Operator::DoesNotExist;
    image.requirements.last_mut().unwrap().values.clear();
    assert!(image_for(&[image], embedded_sku("Standard_D2s_v5").unwrap()).is_some());
}
