//! Hidden test switches: a thread-local setting that a run reads, set for
//! the length of a closure. Tests use them to run a check both ways (with
//! and without a reduction) and compare; a check started on another
//! thread sees the default.

use std::cell::Cell;
use std::thread::LocalKey;

/// A switch over a thread-local cell holding its current setting.
#[doc(hidden)]
pub struct Switch<T: Copy + 'static>(pub &'static LocalKey<Cell<T>>);

impl<T: Copy + 'static> Switch<T> {
    /// The setting on this thread.
    pub fn get(&self) -> T {
        self.0.with(Cell::get)
    }
    /// Run `f` with the setting `v` on this thread, then restore it.
    pub fn with<R>(&self, v: T, f: impl FnOnce() -> R) -> R {
        let before = self.0.with(|c| c.replace(v));
        // Restored on unwind too, so a failing test leaves no setting behind.
        struct Restore<T: Copy + 'static>(&'static LocalKey<Cell<T>>, T);
        impl<T: Copy + 'static> Drop for Restore<T> {
            fn drop(&mut self) {
                self.0.with(|c| c.set(self.1));
            }
        }
        let _restore = Restore(self.0, before);
        f()
    }
}
