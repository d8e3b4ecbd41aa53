//! The pages and their static files, embedded at build time (every file of `crates/web/assets/`,
//! listed by `build.rs`), with their content types.

include!(concat!(env!("OUT_DIR"), "/assets.rs"));

/// The contents of asset `name`, if embedded.
pub fn get(name: &str) -> Option<&'static [u8]> {
    ASSETS.iter().find(|(n, _)| *n == name).map(|(_, b)| *b)
}

/// The HTML file of a page path (`/` is Top), falling back to `index.html`.
pub fn page(path: &str) -> Option<&'static [u8]> {
    let file = match path {
        "/" => "top.html",
        "/query" => "query.html",
        "/compare" => "compare.html",
        "/live" => "live.html",
        _ => return None,
    };
    get(file).or_else(|| get("index.html"))
}

/// The content type of an asset, by its extension.
pub fn content_type(name: &str) -> &'static str {
    let ext = name.rsplit_once('.').map_or("", |(_, e)| e);
    match ext {
        "html" => "text/html; charset=utf-8",
        "css" => "text/css; charset=utf-8",
        "js" | "mjs" => "text/javascript; charset=utf-8",
        "json" => "application/json",
        "svg" => "image/svg+xml",
        "png" => "image/png",
        "ico" => "image/x-icon",
        "woff2" => "font/woff2",
        _ => "text/plain; charset=utf-8",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_fall_back_to_the_index() {
        assert!(get("index.html").is_some());
        assert!(page("/").is_some());
        assert!(page("/live").is_some());
        assert!(page("/nope").is_none());
        assert_eq!(
            content_type("uplot.min.js"),
            "text/javascript; charset=utf-8"
        );
        assert_eq!(content_type("LICENSE-uPlot"), "text/plain; charset=utf-8");
    }
}
