// The replay pages need one thing htmx does not do by itself: when the server refuses an
// option (422, with a message naming it), show that message in place of the result. htmx only
// swaps successful responses unless told otherwise, and this tells it, for the options forms
// marked data-swap-errors only.
"use strict";

document.addEventListener("htmx:beforeSwap", function (event) {
  const detail = event.detail;
  const source = detail.requestConfig && detail.requestConfig.elt;
  if (detail.xhr.status === 422 && source && source.closest("[data-swap-errors]")) {
    detail.shouldSwap = true;
    detail.isError = false;
  }
});
