// A link to a heading inside the folded Solutions opens the fold, so the link lands somewhere.
function openFoldedTarget() {
  const id = decodeURIComponent(window.location.hash.slice(1));
  const target = id && document.getElementById(id);
  const fold = target && target.closest("details");
  if (fold) { fold.open = true; target.scrollIntoView(); }
}
window.addEventListener("hashchange", openFoldedTarget);
document.addEventListener("DOMContentLoaded", openFoldedTarget);
