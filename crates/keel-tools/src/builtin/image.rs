//! Recognising file types by their bytes: images `read` can show, and the
//! names of binary formats it cannot.
//!
//! Types come from magic numbers, never from file extensions, so a renamed
//! file is still recognised and a text file called `x.png` is still text.

/// The largest image `read` returns: 4.5 MB once base64-encoded.
pub(super) const MAX_IMAGE_BYTES: usize = 4_500_000 / 4 * 3;

/// The MIME type of an image format the models accept, if `bytes` is one.
pub fn image_mime(bytes: &[u8]) -> Option<&'static str> {
    if bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
        Some("image/png")
    } else if bytes.starts_with(&[0xFF, 0xD8, 0xFF]) {
        Some("image/jpeg")
    } else if bytes.starts_with(b"GIF87a") || bytes.starts_with(b"GIF89a") {
        Some("image/gif")
    } else if bytes.len() >= 12 && bytes.starts_with(b"RIFF") && bytes.get(8..12) == Some(b"WEBP") {
        Some("image/webp")
    } else {
        None
    }
}

/// A human name for a binary format, for refusal messages.
pub(super) fn binary_kind(bytes: &[u8]) -> &'static str {
    const KINDS: &[(&[u8], &str)] = &[
        (b"\x7fELF", "an ELF executable"),
        (b"%PDF", "a PDF document"),
        (b"PK\x03\x04", "a ZIP archive (or a format built on ZIP)"),
        (b"\x1f\x8b", "a gzip archive"),
        (b"BZh", "a bzip2 archive"),
        (b"\xfd7zXZ\x00", "an xz archive"),
        (b"\x28\xb5\x2f\xfd", "a zstd archive"),
        (b"7z\xbc\xaf\x27\x1c", "a 7-Zip archive"),
        (b"SQLite format 3\x00", "an SQLite database"),
        (b"\x00asm", "a WebAssembly module"),
        (b"\xca\xfe\xba\xbe", "a Java class file or Mach-O binary"),
        (b"\xcf\xfa\xed\xfe", "a Mach-O binary"),
        (b"MZ", "a Windows executable"),
        (b"BM", "a BMP image (not a format models accept)"),
        (b"II*\x00", "a TIFF image (not a format models accept)"),
        (b"MM\x00*", "a TIFF image (not a format models accept)"),
        (b"OggS", "an Ogg media file"),
        (b"ID3", "an MP3 audio file"),
        (b"fLaC", "a FLAC audio file"),
    ];
    KINDS
        .iter()
        .find(|(magic, _)| bytes.starts_with(magic))
        .map(|(_, kind)| *kind)
        .unwrap_or("binary data (not valid UTF-8 text)")
}

/// Standard base64 with padding.
pub fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        let symbols = [(n >> 18) & 63, (n >> 12) & 63, (n >> 6) & 63, n & 63];
        for (position, symbol) in symbols.iter().enumerate() {
            if position <= chunk.len() {
                out.push(char::from(ALPHABET[*symbol as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_the_rfc_vectors() {
        let vectors = [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ];
        for (plain, encoded) in vectors {
            assert_eq!(base64(plain.as_bytes()), encoded);
        }
    }

    #[test]
    fn types_come_from_magic_bytes() {
        assert_eq!(image_mime(b"\x89PNG\r\n\x1a\n...."), Some("image/png"));
        assert_eq!(
            image_mime(b"RIFF\x00\x00\x00\x00WEBPVP8 "),
            Some("image/webp")
        );
        assert_eq!(image_mime(b"GIF89a"), Some("image/gif"));
        assert_eq!(image_mime(b"\xff\xd8\xff\xe0"), Some("image/jpeg"));
        assert_eq!(image_mime(b"hello"), None);
        assert_eq!(binary_kind(b"\x7fELF\x02"), "an ELF executable");
        assert_eq!(
            binary_kind(b"\x00\x01"),
            "binary data (not valid UTF-8 text)"
        );
    }
}
