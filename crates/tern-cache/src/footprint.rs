//! What memcached 1.6.18 would report as an item's size and slab class (`me`'s `size=` and `cls=`), so
//! tools reading them see memcached's numbers, not the store's own compact layout.

/// `sizeof(item)` on 64-bit builds.
const ITEM_HEADER: usize = 48;
/// `settings.slab_chunk_size_max`: half of memcached's 1 MiB slab page.
const CHUNK_SIZE_MAX: usize = 512 << 10;
/// memcached's `MAX_NUMBER_OF_SLAB_CLASSES`: class ids 1 to 63.
const CLASSES_MAX: usize = 64;
/// Chunks are multiples of 8 bytes (`CHUNK_ALIGN_BYTES`).
const CHUNK_ALIGN: usize = 8;

/// The chunk sizes of memcached's slab classes under `-f` (growth factor) and `-n` (the smallest item's
/// key, value and flags), computed as its `slabs_init` does.
#[derive(Clone, Debug)]
pub struct SlabClasses {
    /// Chunk size of class `i + 1`.
    sizes: Vec<usize>,
}

impl SlabClasses {
    pub fn new(factor: f64, min_size: i32) -> SlabClasses {
        let mut sizes = Vec::new();
        // memcached keeps the size in an `unsigned int` (a negative -n wraps), scaling it by the factor
        // each class.
        let mut size = (ITEM_HEADER as i64 + i64::from(min_size)) as u32;
        while sizes.len() < CLASSES_MAX - 2 {
            if f64::from(size) >= CHUNK_SIZE_MAX as f64 / factor {
                break;
            }
            let aligned = (size as usize).next_multiple_of(CHUNK_ALIGN);
            sizes.push(aligned);
            size = (aligned as f64 * factor) as u32;
        }
        sizes.push(CHUNK_SIZE_MAX);
        SlabClasses { sizes }
    }

    /// The class memcached stores an item of `size` bytes in (`slabs_clsid`): the first whose chunks hold
    /// it; larger (chunked) items report the last.
    pub fn class_of(&self, size: usize) -> u32 {
        let index = self.sizes.partition_point(|&chunk| chunk < size);
        (index.min(self.sizes.len() - 1) + 1) as u32
    }
}

impl Default for SlabClasses {
    /// memcached's defaults: `-f 1.25 -n 48`.
    fn default() -> SlabClasses {
        SlabClasses::new(1.25, 48)
    }
}

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
                SlabClasses::default().class_of(item_size(1, value_len, 0, true)),
                class,
                "{value_len}"
            );
        }
    }

    #[test]
    fn the_classes_follow_the_factor_and_the_smallest_size_as_memcached_s() {
        // memcached 1.6.18's `-vv` lines ("slab class N: chunk size S"): 39 classes by default, 12 with
        // `-f 2 -n 100`; with `-f 1.01` the size never grows past 96 (kept in an integer) and the classes
        // stop at 63.
        let default = SlabClasses::default();
        assert_eq!(&default.sizes[..4], [96, 120, 152, 192]);
        assert_eq!(&default.sizes[36..], [315_872, 394_840, 524_288]);
        let doubling = SlabClasses::new(2.0, 100);
        assert_eq!(&doubling.sizes[..4], [152, 304, 608, 1216]);
        assert_eq!(&doubling.sizes[9..], [77_824, 155_648, 524_288]);
        let fine = SlabClasses::new(1.01, 48);
        assert_eq!(fine.sizes.len(), 63);
        assert_eq!(fine.sizes[61], 96);
        assert_eq!((fine.class_of(96), fine.class_of(97)), (1, 63));
        assert_eq!(default.class_of(96), 1);
        assert_eq!(default.class_of(97), 2);
    }
}
