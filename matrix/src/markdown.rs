//! Markdown to the HTML that Matrix clients show (`formatted_body`, `org.matrix.custom.html`).
//! A small renderer of the Markdown a model writes: paragraphs, headings, fenced code, lists,
//! quotes, inline code, bold, italic and links.
//! **Invariant:** every character of the input is escaped before it reaches the output; no raw
//! HTML passes, and a link's target is kept only for `http`, `https` and `mailto`.

/// The HTML of `text`.
pub fn to_html(text: &str) -> String {
    let mut out = String::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let trimmed = line.trim_start();
        if trimmed.is_empty() {
            continue;
        }
        if let Some(info) = trimmed.strip_prefix("```") {
            let mut code = String::new();
            for line in lines.by_ref() {
                if line.trim_start().starts_with("```") {
                    break;
                }
                code.push_str(line);
                code.push('\n');
            }
            let language = info.trim();
            if language.is_empty() || !language.chars().all(|c| c.is_ascii_alphanumeric()) {
                out.push_str("<pre><code>");
            } else {
                out.push_str(&format!("<pre><code class=\"language-{language}\">"));
            }
            out.push_str(&escape(&code));
            out.push_str("</code></pre>\n");
        } else if let Some((level, title)) = heading(trimmed) {
            out.push_str(&format!("<h{level}>{}</h{level}>\n", inline(title)));
        } else if list_item(trimmed).is_some() {
            let ordered = list_item(trimmed).is_some_and(|(ordered, _)| ordered);
            let tag = if ordered { "ol" } else { "ul" };
            out.push_str(&format!("<{tag}>\n"));
            let mut item = list_item(trimmed).map(|(_, rest)| rest.to_string());
            while let Some(text) = item.take() {
                let mut text = text;
                // Lines that continue an item (indented, not a new item) join it.
                while let Some(next) = lines.peek() {
                    let next_trimmed = next.trim_start();
                    if next_trimmed.is_empty() {
                        break;
                    }
                    if let Some((o, rest)) = list_item(next_trimmed) {
                        if o == ordered {
                            item = Some(rest.to_string());
                            lines.next();
                        }
                        break;
                    }
                    if !next.starts_with(' ') {
                        break;
                    }
                    text.push(' ');
                    text.push_str(next_trimmed);
                    lines.next();
                }
                out.push_str(&format!("<li>{}</li>\n", inline(&text)));
            }
            out.push_str(&format!("</{tag}>\n"));
        } else if trimmed.starts_with('>') {
            let mut quoted = vec![quote_line(trimmed)];
            while let Some(next) = lines.peek().map(|l| l.trim_start()) {
                if !next.starts_with('>') {
                    break;
                }
                quoted.push(quote_line(next));
                lines.next();
            }
            out.push_str(&format!(
                "<blockquote>\n{}</blockquote>\n",
                to_html(&quoted.join("\n"))
            ));
        } else {
            let mut paragraph = vec![inline(trimmed)];
            while let Some(next) = lines.peek().map(|l| l.trim_start()) {
                if next.is_empty()
                    || next.starts_with("```")
                    || next.starts_with('>')
                    || heading(next).is_some()
                    || list_item(next).is_some()
                {
                    break;
                }
                paragraph.push(inline(next));
                lines.next();
            }
            out.push_str(&format!("<p>{}</p>\n", paragraph.join("<br>")));
        }
    }
    out.truncate(out.trim_end().len());
    out
}

fn quote_line(line: &str) -> &str {
    let rest = &line[1..];
    rest.strip_prefix(' ').unwrap_or(rest)
}

/// `# Title` → (1, "Title"), up to six `#`.
fn heading(line: &str) -> Option<(usize, &str)> {
    let level = line.chars().take_while(|&c| c == '#').count();
    let rest = line[level..].strip_prefix(' ')?;
    (1..=6).contains(&level).then_some((level, rest.trim()))
}

/// `- item`, `* item`, `+ item` → (false, "item"); `3. item` or `3) item` → (true, "item").
fn list_item(line: &str) -> Option<(bool, &str)> {
    for bullet in ["- ", "* ", "+ "] {
        if let Some(rest) = line.strip_prefix(bullet) {
            return Some((false, rest));
        }
    }
    let digits = line.chars().take_while(char::is_ascii_digit).count();
    if digits == 0 || digits > 9 {
        return None;
    }
    let rest = &line[digits..];
    rest.strip_prefix(". ")
        .or_else(|| rest.strip_prefix(") "))
        .map(|rest| (true, rest))
}

/// Escapes the five characters HTML gives a meaning to.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// One line's inline formatting: `code`, **bold**, *italic* or _italic_, [text](url).
fn inline(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::new();
    let mut i = 0;
    let find = |from: usize, pattern: &[char]| -> Option<usize> {
        (from..chars.len().saturating_sub(pattern.len() - 1))
            .find(|&j| chars[j..j + pattern.len()] == *pattern)
    };
    let text_of = |from: usize, to: usize| -> String { chars[from..to].iter().collect() };
    while i < chars.len() {
        let c = chars[i];
        if c == '`'
            && let Some(end) = find(i + 1, &['`'])
        {
            out.push_str(&format!("<code>{}</code>", escape(&text_of(i + 1, end))));
            i = end + 1;
            continue;
        }
        if (c == '*' || c == '_') && chars.get(i + 1) == Some(&c) {
            if let Some(end) = find(i + 2, &[c, c]).filter(|&end| end > i + 2) {
                out.push_str(&format!(
                    "<strong>{}</strong>",
                    inline(&text_of(i + 2, end))
                ));
                i = end + 2;
                continue;
            }
        } else if (c == '*' || c == '_')
            && chars.get(i + 1).is_some_and(|n| !n.is_whitespace())
            && (c == '*' || i == 0 || !chars[i - 1].is_alphanumeric())
            && let Some(end) = find(i + 1, &[c]).filter(|&end| !chars[end - 1].is_whitespace())
        {
            out.push_str(&format!("<em>{}</em>", inline(&text_of(i + 1, end))));
            i = end + 1;
            continue;
        }
        if c == '['
            && let Some(close) = find(i + 1, &[']'])
            && chars.get(close + 1) == Some(&'(')
            && let Some(end) = find(close + 2, &[')'])
        {
            let label = inline(&text_of(i + 1, close));
            let target = text_of(close + 2, end);
            let safe = ["http://", "https://", "mailto:"]
                .iter()
                .any(|scheme| target.to_ascii_lowercase().starts_with(scheme));
            if safe {
                out.push_str(&format!("<a href=\"{}\">{label}</a>", escape(&target)));
            } else {
                out.push_str(&format!("{label} ({})", escape(&target)));
            }
            i = end + 1;
            continue;
        }
        out.push_str(&escape(&c.to_string()));
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::to_html;

    #[test]
    fn paragraphs_and_line_breaks() {
        assert_eq!(
            to_html("Hello\nworld\n\nSecond"),
            "<p>Hello<br>world</p>\n<p>Second</p>"
        );
    }

    #[test]
    fn raw_html_is_escaped_everywhere() {
        let html = to_html("<script>alert('x')</script> & **<b>**\n\n```\n<img src=x>\n```");
        assert!(!html.contains("<script") && !html.contains("<img") && !html.contains("<b>"));
        assert_eq!(
            html,
            "<p>&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; <strong>&lt;b&gt;</strong></p>\n\
             <pre><code>&lt;img src=x&gt;\n</code></pre>"
        );
    }

    #[test]
    fn code_blocks_keep_their_text_and_language() {
        assert_eq!(
            to_html("```rust\nlet a = *b * c;\n```"),
            "<pre><code class=\"language-rust\">let a = *b * c;\n</code></pre>"
        );
        // A language that could break out of the attribute is dropped.
        assert_eq!(
            to_html("```\"onload\n1\n```"),
            "<pre><code>1\n</code></pre>"
        );
    }

    #[test]
    fn inline_code_bold_italic_links() {
        assert_eq!(
            to_html("Use `a*b*c`, **bold**, *it*, _it_ and snake_case_name."),
            "<p>Use <code>a*b*c</code>, <strong>bold</strong>, <em>it</em>, <em>it</em> and \
             snake_case_name.</p>"
        );
        assert_eq!(
            to_html("[docs](https://example.org/a?b=1&c=\"2\") [x](javascript:alert(1))"),
            "<p><a href=\"https://example.org/a?b=1&amp;c=&quot;2&quot;\">docs</a> x \
             (javascript:alert(1))</p>"
        );
    }

    #[test]
    fn lists_headings_and_quotes() {
        assert_eq!(
            to_html("# Plan\n- one\n- two\n  continued\n\n1. first\n2. second\n> quoted\n> more"),
            "<h1>Plan</h1>\n<ul>\n<li>one</li>\n<li>two continued</li>\n</ul>\n\
             <ol>\n<li>first</li>\n<li>second</li>\n</ol>\n\
             <blockquote>\n<p>quoted<br>more</p></blockquote>"
        );
    }
}
