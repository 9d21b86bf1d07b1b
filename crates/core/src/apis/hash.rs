//! The stable hashes a NodeClaim is stamped with at creation (`karpenter.sh/nodepool-hash`,
//! `karpenter.azure.com/aksnodeclass-hash` and their versions), against which drift is judged later.
//! [`NodePool::hash`] and [`AKSNodeClass::hash`] choose the fields that count; this file turns JSON
//! into a hash that is the same in every process and on every platform.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;

use crate::apis::aksnodeclass::NODECLASS_HASH_VERSION;
use crate::apis::nodepool::NODEPOOL_HASH_VERSION;
use crate::apis::{AKSNodeClass, NodePool};
use crate::model::labels::{
    ANNOTATION_NODECLASS_HASH, ANNOTATION_NODECLASS_HASH_VERSION, ANNOTATION_NODEPOOL_HASH,
    ANNOTATION_NODEPOOL_HASH_VERSION,
};

/// An object that cannot be serialised for hashing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{object}: cannot be serialised for hashing: {message}")]
pub struct HashError {
    pub object: String,
    pub message: String,
}

/// FNV-1a, 64 bits: stable across runs, processes and platforms (std's hasher is randomly keyed).
pub(crate) fn fnv1a(bytes: &[u8]) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    bytes.iter().fold(OFFSET, |h, b| (h ^ u64::from(*b)).wrapping_mul(PRIME))
}

/// Whether a value counts as unset: null, `""`, `[]` and `{}` hash as if the field were absent, so
/// adding a field to the API (or writing an empty list) does not drift existing nodes (upstream
/// hashes with hashstructure's `IgnoreZeroValue` and `ZeroNil`). `false` and `0` are kept: an
/// explicit `false` differs from an unset field whose default is `true`.
fn is_unset(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        _ => false,
    }
}

/// A canonical text for a JSON value: object keys sorted, unset fields dropped, and arrays as sets
/// (their elements' canonical texts sorted), as upstream hashes slices (`SlicesAsSets`): reordering
/// taints or sysctls is not a change.
fn canonical(value: &Value, out: &mut String) {
    match value {
        Value::Array(items) => {
            let mut texts: Vec<String> = items
                .iter()
                .map(|v| {
                    let mut s = String::new();
                    canonical(v, &mut s);
                    s
                })
                .collect();
            texts.sort();
            out.push('[');
            out.push_str(&texts.join(","));
            out.push(']');
        }
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().filter(|(_, v)| !is_unset(v)).collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (i, (key, v)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                canonical(v, out);
            }
            out.push('}');
        }
        other => out.push_str(&other.to_string()),
    }
}

/// The stable hash of a JSON value, as the decimal text upstream's hash annotations hold.
pub fn hash_value(value: &Value) -> String {
    let mut text = String::new();
    canonical(value, &mut text);
    fnv1a(text.as_bytes()).to_string()
}

/// The stable hash of any serialisable value (see [`hash_value`]); `object` names it in the error.
pub fn stable_hash<T: Serialize>(value: &T, object: &str) -> Result<String, HashError> {
    Ok(hash_value(&to_value(value, object)?))
}

/// `value` as JSON, or the error naming `object`.
pub fn to_value<T: Serialize>(value: &T, object: &str) -> Result<Value, HashError> {
    serde_json::to_value(value).map_err(|e| HashError { object: object.to_string(), message: e.to_string() })
}

/// The four hash annotations a NodeClaim is created with; the class's two only when it exists.
pub fn annotations(
    pool: &NodePool,
    class: Option<&AKSNodeClass>,
) -> Result<BTreeMap<String, String>, HashError> {
    let mut out = BTreeMap::from([
        (ANNOTATION_NODEPOOL_HASH.to_string(), pool.hash()?),
        (ANNOTATION_NODEPOOL_HASH_VERSION.to_string(), NODEPOOL_HASH_VERSION.to_string()),
    ]);
    if let Some(class) = class {
        out.insert(ANNOTATION_NODECLASS_HASH.to_string(), class.hash()?);
        out.insert(ANNOTATION_NODECLASS_HASH_VERSION.to_string(), NODECLASS_HASH_VERSION.to_string());
    }
    Ok(out)
}
