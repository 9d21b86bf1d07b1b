//! Reading Kubernetes objects from YAML or JSON files for the command-line tools: multi-document
//! YAML, JSON, and `List` objects, with errors that name the file, the object and the field.

use std::path::Path;

use serde::de::DeserializeOwned;
use serde_json::Value;

/// A file could not be read as the objects it should hold.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    #[error("{file}: {source}")]
    Read { file: String, source: std::io::Error },
    #[error("{file}: document {index}: not valid YAML or JSON: {message}")]
    Syntax { file: String, index: usize, message: String },
    #[error("{file}: {object}: {message}")]
    Invalid { file: String, object: String, message: String },
    #[error("{file}: expected {expected}, found {found}")]
    WrongKind { file: String, expected: String, found: String },
}

/// One object from a file: its kind, a readable name and the raw JSON.
#[derive(Debug, Clone)]
pub struct RawObject {
    pub kind: String,
    /// `Kind/name` or `Kind/namespace/name`, for messages.
    pub display: String,
    pub value: Value,
}

/// Reads every object in a file, expanding `List`s and skipping empty documents.
pub fn read_objects(path: &Path) -> Result<Vec<RawObject>, ManifestError> {
    let file = path.display().to_string();
    let text =
        std::fs::read_to_string(path).map_err(|source| ManifestError::Read { file: file.clone(), source })?;
    parse_objects(&file, &text)
}

/// [`read_objects`] on text already in memory; `file` is used in messages.
pub fn parse_objects(file: &str, text: &str) -> Result<Vec<RawObject>, ManifestError> {
    let mut out = vec![];
    for (index, doc) in serde_yaml::Deserializer::from_str(text).enumerate() {
        let value: Value = serde::Deserialize::deserialize(doc).map_err(|e| ManifestError::Syntax {
            file: file.to_string(),
            index: index + 1,
            message: e.to_string(),
        })?;
        collect(file, value, &mut out)?;
    }
    Ok(out)
}

fn collect(file: &str, value: Value, out: &mut Vec<RawObject>) -> Result<(), ManifestError> {
    if value.is_null() {
        return Ok(());
    }
    let kind = value.get("kind").and_then(Value::as_str).unwrap_or_default().to_string();
    if kind.is_empty() {
        return Err(ManifestError::Invalid {
            file: file.to_string(),
            object: "object".into(),
            message: "has no `kind`".into(),
        });
    }
    if kind == "List" || kind.ends_with("List") {
        if let Some(Value::Array(items)) = value.get("items") {
            for item in items.clone() {
                collect(file, item, out)?;
            }
            return Ok(());
        }
    }
    let meta = value.get("metadata");
    let name = meta.and_then(|m| m.get("name")).and_then(Value::as_str).unwrap_or("<unnamed>");
    let display = match meta.and_then(|m| m.get("namespace")).and_then(Value::as_str) {
        Some(ns) => format!("{kind}/{ns}/{name}"),
        None => format!("{kind}/{name}"),
    };
    out.push(RawObject { kind, display, value });
    Ok(())
}

impl RawObject {
    /// Deserializes into a typed object; the message carries the field path from serde.
    pub fn decode<T: DeserializeOwned>(&self, file: &str) -> Result<T, ManifestError> {
        serde_path_to_error::deserialize(&self.value).map_err(|e| ManifestError::Invalid {
            file: file.to_string(),
            object: self.display.clone(),
            message: format!("{}: {}", e.path(), e.inner()),
        })
    }
}

/// Reads a file that must hold exactly one object of `kind`.
pub fn read_one<T: DeserializeOwned>(path: &Path, kind: &str) -> Result<(RawObject, T), ManifestError> {
    let file = path.display().to_string();
    let objects = read_objects(path)?;
    match objects.as_slice() {
        [one] if one.kind == kind => {
            let typed = one.decode(&file)?;
            Ok((one.clone(), typed))
        }
        [one] => Err(ManifestError::WrongKind {
            file,
            expected: format!("one {kind}"),
            found: one.display.clone(),
        }),
        many => Err(ManifestError::WrongKind {
            file,
            expected: format!("one {kind}"),
            found: format!("{} objects", many.len()),
        }),
    }
}
