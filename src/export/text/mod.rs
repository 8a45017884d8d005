//! What the jobs print, as text a caller prints or keeps (the command line prints it; the
//! Python package can show the same lines). Units are said in the text (MiB = 1024²).

pub mod compute;
