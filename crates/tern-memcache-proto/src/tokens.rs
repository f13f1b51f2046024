//! memcached's command-line tokenizer (`tokenize_command` in proto_text.c).

/// memcached's `MAX_TOKENS`: at most 23 tokens are split off a line; the rest stays unsplit.
pub(crate) const MAX_TOKENS: usize = 24;

/// A command line split on spaces exactly as memcached does: only `' '` separates (tabs and control bytes
/// belong to tokens), runs of spaces are one separator, and after 23 tokens the remainder is left unsplit.
pub(crate) struct Tokens<'a> {
    items: [&'a [u8]; MAX_TOKENS - 1],
    len: usize,
    /// The unsplit remainder after the 23rd token, if any bytes remain.
    pub(crate) rest: Option<&'a [u8]>,
}

impl<'a> Tokens<'a> {
    pub(crate) fn new(line: &'a [u8]) -> Self {
        let mut tokens = Tokens {
            items: [&[][..]; MAX_TOKENS - 1],
            len: 0,
            rest: None,
        };
        let mut start = 0;
        let mut i = 0;
        while i < line.len() {
            if line[i] == b' ' {
                if start != i {
                    tokens.items[tokens.len] = &line[start..i];
                    tokens.len += 1;
                    if tokens.len == MAX_TOKENS - 1 {
                        i += 1;
                        start = i;
                        break;
                    }
                }
                start = i + 1;
            }
            i += 1;
        }
        if start != i {
            tokens.items[tokens.len] = &line[start..i];
            tokens.len += 1;
        }
        if i < line.len() {
            tokens.rest = Some(&line[i..]);
        }
        tokens
    }

    /// memcached's `ntokens`: the real tokens plus the terminal one.
    pub(crate) fn ntokens(&self) -> usize {
        self.len + 1
    }

    /// Token `i`; the terminal token (and anything past it) is empty, as memcached's length-0 terminal token.
    pub(crate) fn get(&self, i: usize) -> &'a [u8] {
        if i < self.len {
            self.items[i]
        } else {
            &[]
        }
    }

    /// The real tokens from `from` on.
    pub(crate) fn from(&self, from: usize) -> &[&'a [u8]] {
        &self.items[from.min(self.len)..self.len]
    }

    /// memcached's `set_noreply_maybe`: the last real token is exactly `noreply`.
    pub(crate) fn noreply(&self) -> bool {
        self.len >= 1 && self.items[self.len - 1] == b"noreply"
    }
}

/// Space-separated words of part of a command line, without allocating (keys of `get`, arguments of `stats`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Words<'a> {
    rest: &'a [u8],
}

impl<'a> Words<'a> {
    /// The words of `rest`, split on spaces as memcached splits a command line.
    pub fn new(rest: &'a [u8]) -> Self {
        Words { rest }
    }

    /// What is left to split (for a server that goes on with the words later, from a copy).
    pub fn remainder(&self) -> &'a [u8] {
        self.rest
    }

    /// True when no word is left.
    pub fn is_empty(&self) -> bool {
        self.rest.iter().all(|&b| b == b' ')
    }
}

impl<'a> Iterator for Words<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        let start = self.rest.iter().position(|&b| b != b' ')?;
        let rest = &self.rest[start..];
        let end = memchr::memchr(b' ', rest).unwrap_or(rest.len());
        self.rest = &rest[end..];
        Some(&rest[..end])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_like_memcached() {
        let t = Tokens::new(b"  get  a\tb  c ");
        assert_eq!(t.ntokens(), 4);
        assert_eq!(t.get(0), b"get");
        assert_eq!(t.get(1), b"a\tb");
        assert_eq!(t.get(2), b"c");
        assert_eq!(t.get(3), b"");
        assert!(t.rest.is_none());
    }

    #[test]
    fn stops_after_23_tokens() {
        let line: Vec<u8> = (0..30)
            .flat_map(|i| format!("t{i} ").into_bytes())
            .collect();
        let t = Tokens::new(&line);
        assert_eq!(t.ntokens(), MAX_TOKENS);
        assert_eq!(t.get(22), b"t22");
        assert_eq!(t.rest.map(|r| &r[..4]), Some(&b"t23 "[..]));
        let words: Vec<&[u8]> = Words::new(t.rest.unwrap()).collect();
        assert_eq!(words.len(), 7);
    }
}
