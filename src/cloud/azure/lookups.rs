//! The ARM reads behind AKSNodeClass status: the versions of a community-gallery image definition
//! (`Microsoft.Compute/locations/communityGalleries/images/versions`, api-version 2023-07-03 through
//! azure_mgmt_compute) and a subnet (azure_mgmt_network). Failures come back as [`ArmFailure`]s for the
//! provider to classify; choosing among the versions is [`super::imagefamily`]'s.

use futures::StreamExt;

use super::client::ArmClients;
use super::errors::ArmFailure;
use super::imagefamily::PublishedVersion;
use super::subnet::SubnetId;

/// Every version of `definition` in the community gallery `gallery` (its public name) in `location`,
/// following `nextLink` pages.
pub async fn image_versions(
    clients: &ArmClients,
    location: &str,
    gallery: &str,
    definition: &str,
) -> Result<Vec<PublishedVersion>, ArmFailure> {
    let mut pages = clients
        .compute
        .community_gallery_image_versions_client()
        .list(clients.subscription_id.clone(), location, gallery, definition)
        .into_stream();
    let mut out = Vec::new();
    while let Some(page) = pages.next().await {
        let page = page.map_err(|e| ArmFailure::from_sdk(&e))?;
        out.extend(page.value.into_iter().filter_map(|version| {
            let properties = version.properties.unwrap_or_default();
            Some(PublishedVersion {
                name: version.pir_community_gallery_resource.name?,
                published: properties.published_date.map(|d| d.unix_timestamp()),
                exclude_from_latest: properties.exclude_from_latest.unwrap_or(false),
            })
        }));
    }
    Ok(out)
}

/// Reads the subnet; Ok when it exists (what it holds is not needed yet).
pub async fn get_subnet(clients: &ArmClients, id: &SubnetId) -> Result<(), ArmFailure> {
    clients
        .network
        .subnets_client()
        .get(&id.resource_group, &id.virtual_network, &id.subnet, &id.subscription)
        .await
        .map(|_| ())
        .map_err(|e| ArmFailure::from_sdk(&e))
}
