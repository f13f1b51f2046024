//! What memcached 1.6.18 would report as an item's size and slab class (`me`'s `size=` and `cls=`), so
//! tools reading them see memcached's numbers, not the store's own compact layout.

/// `sizeof(item)` on 64-bit builds.
const ITEM_HEADER: usize = 48;
/// The smallest chunk: `sizeof(item) + settings.chunk_size` (48 + 48).
const SMALLEST_CHUNK: usize = 96;
/// `settings.slab_chunk_size_max`: half of memcached's 1 MiB slab page.
const CHUNK_SIZE_MAX: usize = 512 << 10;
const GROWTH_FACTOR: f64 = 1.25;

/// memcached's `ITEM_ntotal`: header, key and its NUL, client flags when nonzero, the value with its
/// `\r\n`, and the CAS unique when CAS is on.
pub fn item_size(key_len: usize, value_len: usize, flags: u32, cas: bool) -> usize {
    ITEM_HEADER
        + key_len
        + 1
        + if flags != 0 { 4 } else { 0 }
        + value_len
        + 2
        + if cas { 8 } else { 0 }
}

/// The slab class memcached (default `-f 1.25 -n 48`) stores an item of `size` bytes in. The last class
/// holds `CHUNK_SIZE_MAX`-byte chunks, and larger (chunked) items report it too.
pub fn slab_class(size: usize) -> u32 {
    let mut chunk = SMALLEST_CHUNK;
    let mut class = 1;
    loop {
        if chunk as f64 >= CHUNK_SIZE_MAX as f64 / GROWTH_FACTOR {
            return class;
        }
        let aligned = chunk.next_multiple_of(8);
        if aligned >= size {
            return class;
        }
        class += 1;
        chunk = (aligned as f64 * GROWTH_FACTOR) as usize;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_classes_match_memcached() {
        // From memcached 1.6.18's `me` after storing values under a one-byte key.
        assert_eq!(item_size(1, 12, 1, true), 76);
        for (value_len, class) in [
            (12, 1),
            (30, 1),
            (37, 2),
            (1000, 12),
            (400_000, 39),
            (600_000, 39),
        ] {
            assert_eq!(
                slab_class(item_size(1, value_len, 0, true)),
                class,
                "{value_len}"
            );
        }
    }
}
