// The ipywidgets HTML manager calls MathJax.Hub.Queue (the MathJax 2 API) to typeset widget labels;
// this site loads MathJax 3, which has no Hub. Give every MathJax object the page sees a Hub whose
// Queue typesets the element with MathJax 3 (MathJax 3 replaces window.MathJax when it starts).
(function () {
  function addHub(mj) {
    if (mj && typeof mj === "object" && !mj.Hub) {
      mj.Hub = {
        Queue: function (job) {
          var element = job && job[2];
          var current = window.MathJax;
          if (current && typeof current.typesetPromise === "function") {
            current.typesetPromise(element ? [element] : undefined).catch(function () {});
          }
        },
      };
    }
    return mj;
  }
  var current = addHub(window.MathJax);
  Object.defineProperty(window, "MathJax", {
    configurable: true,
    get: function () { return current; },
    set: function (value) { current = addHub(value); },
  });
})();
