"use strict";

document.getElementById("sign-in-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const error = document.getElementById("sign-in-error");
  error.textContent = "";
  const token = document.getElementById("token");
  try {
    await Runyard.api("POST", "v1/session", { json: { token: token.value.trim() } });
    token.value = "";
    window.location.assign(Runyard.base);
  } catch (e) {
    error.textContent = e.status === 401 ? "That token is not valid (or was revoked)."
                                         : Runyard.describeError(e);
    token.focus();
  }
});
