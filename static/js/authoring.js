/* Authoring pages: drag-and-drop multi-file upload with a progress bar, and the rubric's per-kind fields.
   Without this script the forms still work: the upload form posts normally, every kind's fields show. */
(function () {
  "use strict";

  function csrfToken(form) {
    var input = form.querySelector("input[name=csrfmiddlewaretoken]");
    return input ? input.value : "";
  }

  function showProgress(form, loaded, total, label) {
    var box = form.querySelector("[data-progress]");
    var bar = box.querySelector("progress");
    box.hidden = false;
    bar.value = total ? Math.round((loaded / total) * 100) : 0;
    box.querySelector("[data-progress-text]").textContent = label;
  }

  function formatBytes(bytes) {
    if (bytes >= 1048576) return (bytes / 1048576).toFixed(1) + " MB";
    if (bytes >= 1024) return (bytes / 1024).toFixed(0) + " KB";
    return bytes + " B";
  }

  // One request for all the files, so the server answers with the whole list (and every refusal) at once.
  function upload(form, files) {
    if (!files.length) return;
    var data = new FormData();
    data.append("csrfmiddlewaretoken", csrfToken(form));
    data.append("folder", form.querySelector("[name=folder]").value);
    var total = 0;
    for (var i = 0; i < files.length; i++) {
      data.append("files", files[i], files[i].name);
      total += files[i].size;
    }
    var count = files.length + (files.length === 1 ? " file" : " files");
    var button = form.querySelector("button[type=submit]");
    button.disabled = true;
    var xhr = new XMLHttpRequest();
    xhr.open("POST", form.action);
    xhr.setRequestHeader("X-Requested-With", "XMLHttpRequest");
    xhr.setRequestHeader("X-CSRFToken", csrfToken(form));
    xhr.upload.addEventListener("progress", function (event) {
      if (event.lengthComputable) {
        showProgress(form, event.loaded, event.total, "Uploading " + count + ": " + formatBytes(event.loaded) + " of " + formatBytes(event.total));
      }
    });
    xhr.upload.addEventListener("load", function () {
      showProgress(form, total, total, "Uploaded " + count + "; storing…");
    });
    xhr.addEventListener("load", function () {
      button.disabled = false;
      var target = document.querySelector(form.dataset.target);
      if (xhr.status === 200 || xhr.status === 400) {
        target.outerHTML = xhr.responseText;
        var swapped = document.querySelector(form.dataset.target);
        if (window.htmx) window.htmx.process(swapped);
        showProgress(form, total, total, xhr.status === 200 ? "Done." : "Refused; see the messages below.");
      } else {
        showProgress(form, 0, total, "Upload failed (HTTP " + xhr.status + "). Nothing was stored; try again.");
      }
      form.querySelector("input[type=file]").value = "";
    });
    xhr.addEventListener("error", function () {
      button.disabled = false;
      showProgress(form, 0, total, "The connection broke during the upload. Try again.");
    });
    xhr.send(data);
  }

  function setUpUpload(form) {
    var zone = form.querySelector("[data-dropzone]");
    var input = form.querySelector("input[type=file]");
    form.addEventListener("submit", function (event) {
      event.preventDefault();
      upload(form, input.files);
    });
    ["dragenter", "dragover"].forEach(function (name) {
      zone.addEventListener(name, function (event) {
        event.preventDefault();
        zone.classList.add("dragging");
      });
    });
    ["dragleave", "drop"].forEach(function (name) {
      zone.addEventListener(name, function (event) {
        event.preventDefault();
        zone.classList.remove("dragging");
      });
    });
    zone.addEventListener("drop", function (event) {
      upload(form, event.dataTransfer.files);
    });
  }

  // A criterion's kind decides which parameter fields count; the others are hidden and not submitted.
  function showKindFields(select) {
    var form = select.closest("[data-criterion-form]");
    form.querySelectorAll("fieldset[data-kind]").forEach(function (fieldset) {
      var chosen = fieldset.dataset.kind === select.value;
      fieldset.hidden = !chosen;
      fieldset.disabled = !chosen;
    });
  }

  document.addEventListener("change", function (event) {
    if (event.target.matches("[data-criterion-form] select[name$=kind]")) showKindFields(event.target);
  });

  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("form[data-upload]").forEach(setUpUpload);
  });
})();
