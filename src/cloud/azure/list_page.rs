//! One page of an ARM list answer (`{"value": [...], "nextLink": "..."}`), read one item at a time.
//!
//! The SDK parses a whole page into its typed models before the first item can be looked at: for a
//! page of VMs that is some 8 KB a VM on top of the page's text. Here each item of `value` is parsed
//! into a JSON value, handed to the caller and dropped before the next is parsed, so a listing holds
//! the page's text, one item and whatever the caller keeps of each.

use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

/// Hands every item of the page's `value` to `each`, in order; returns the page's `nextLink` (`None`
/// when absent, null or empty: the last page). Fields other than `value` and `nextLink` are skipped.
pub fn each_item(page: &[u8], each: &mut dyn FnMut(Value)) -> Result<Option<String>, serde_json::Error> {
    let mut de = serde_json::Deserializer::from_slice(page);
    let next = de.deserialize_map(PageVisitor { each })?;
    de.end()?;
    Ok(next.filter(|link| !link.is_empty()))
}

/// The page object: `value` goes through [`Items`], `nextLink` is kept.
struct PageVisitor<'a> {
    each: &'a mut dyn FnMut(Value),
}

impl<'de> Visitor<'de> for PageVisitor<'_> {
    type Value = Option<String>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an ARM list page: an object with `value` and `nextLink`")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Option<String>, A::Error> {
        let mut next = None;
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "value" => map.next_value_seed(Items { each: &mut *self.each })?,
                "nextLink" => next = map.next_value::<Option<String>>()?,
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(next)
    }
}

/// The page's `value` array (null reads as no item).
struct Items<'a> {
    each: &'a mut dyn FnMut(Value),
}

impl<'de> DeserializeSeed<'de> for Items<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Items<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an array of resources")
    }

    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while let Some(item) = seq.next_element::<Value>()? {
            (self.each)(item);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn names(page: &Value) -> (Vec<String>, Option<String>) {
        let mut seen = vec![];
        let text = serde_json::to_vec(page).unwrap();
        let next = each_item(&text, &mut |item| seen.push(item["name"].as_str().unwrap_or("?").to_string()))
            .unwrap();
        (seen, next)
    }

    #[test]
    fn every_item_is_handed_over_in_order_with_the_next_link() {
        let page = json!({
            "value": [{ "name": "a", "properties": { "x": [1, 2] } }, { "name": "b" }],
            "nextLink": "https://management.azure.com/next?$skiptoken=2",
            "@odata.count": 7,
        });
        let (seen, next) = names(&page);
        assert_eq!(seen, ["a", "b"]);
        assert_eq!(next.as_deref(), Some("https://management.azure.com/next?$skiptoken=2"));
    }

    #[test]
    fn the_last_page_has_no_next_link_whichever_way_it_says_so() {
        for page in [
            json!({ "value": [{ "name": "a" }] }),
            json!({ "value": [{ "name": "a" }], "nextLink": null }),
            json!({ "nextLink": "", "value": [{ "name": "a" }] }),
        ] {
            assert_eq!(names(&page), (vec!["a".to_string()], None), "{page}");
        }
        assert_eq!(names(&json!({ "value": null })), (vec![], None));
        assert_eq!(names(&json!({})), (vec![], None));
    }

    #[test]
    fn a_page_that_is_not_a_list_answer_is_an_error() {
        for text in [&b"[]"[..], b"{\"value\": 3}", b"{\"value\": [1", b"{} trailing"] {
            assert!(each_item(text, &mut |_| {}).is_err(), "{}", String::from_utf8_lossy(text));
        }
    }
}
