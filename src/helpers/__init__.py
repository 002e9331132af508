"""helpers: the finished, tested code that the book's chapters build by hand."""
