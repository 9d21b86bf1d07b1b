//! What the AKSNodeClass status needs from Azure, and the status it makes.
//!
//! - `checks`: the image and subnet lookups behind the status, remembered per image definition and
//!   subnet and repeated only when due;
//! - `recheck`: when to repeat a lookup (pure);
//! - `status`: the status the lookups make — `kubernetesVersion`, `images` and the conditions (pure).

pub mod checks;
pub mod recheck;
pub mod status;
