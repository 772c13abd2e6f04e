//! `--image FILE`: images read as hostile input and sent beside the prompt.
//!
//! Each file must be a regular file (opened without blocking, then checked
//! with `fstat` on the open file, so a FIFO or device is refused without
//! being read), at most [`MAX_IMAGE_BYTES`], and a PNG, JPEG, GIF or WebP
//! by its magic bytes (the extension is not trusted). Errors name the file
//! and the reason, never its contents.

use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use keel_protocol::ImageContent;
use keel_tools::builtin::image::{base64, image_mime};

use crate::startup::StartupError;

/// The largest image `--image` reads: 10 MiB.
pub const MAX_IMAGE_BYTES: u64 = 10 * 1024 * 1024;

/// Reads each of `paths` as an image block, in order.
pub fn read_all(paths: &[std::path::PathBuf]) -> Result<Vec<ImageContent>, StartupError> {
    paths.iter().map(|path| read(path)).collect()
}

/// Reads one image file: a regular file, at most [`MAX_IMAGE_BYTES`], of a
/// type the models accept.
pub fn read(path: &Path) -> Result<ImageContent, StartupError> {
    let name = path.display();
    let unreadable = |why: &dyn std::fmt::Display| {
        StartupError::new(
            "image_unreadable",
            format!("cannot read the image {name}: {why}"),
        )
    };
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(|error| unreadable(&error))?;
    let metadata = file.metadata().map_err(|error| unreadable(&error))?;
    if !metadata.file_type().is_file() {
        return Err(unreadable(&"not a regular file"));
    }
    let mut bytes = Vec::new();
    file.take(MAX_IMAGE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|error| unreadable(&error))?;
    if bytes.len() as u64 > MAX_IMAGE_BYTES {
        return Err(StartupError::new(
            "image_too_large",
            format!("the image {name} is larger than {MAX_IMAGE_BYTES} bytes (10 MiB)"),
        ));
    }
    let Some(mime) = image_mime(&bytes) else {
        return Err(StartupError::new(
            "image_unsupported",
            format!("the image {name} is not a PNG, JPEG, GIF or WebP image"),
        ));
    };
    Ok(ImageContent::new(mime, base64(&bytes)))
}
