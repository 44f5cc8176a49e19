"""Every word the hosted pages show, in one catalog per language (English shipped).

A translation is one more dict with the same keys; `text(key, **values)` formats one entry,
and templates call it as `t("key")`. Error codes of the API and the `error=` codes of the
OpenID Connect redirect are words here too, so a page never shows a bare code.
"""

from __future__ import annotations

from typing import Any

EN: dict[str, str] = {
    # chrome
    "nav.label": "Main",
    "nav.notifications": "Notifications",
    "nav.accounts": "Accounts",
    "nav.account": "Your profile",
    "nav.members": "Members",
    "nav.join_requests": "Join requests",
    "nav.preferences": "Preferences",
    "header.signed_in_as": "Signed in as {email}",
    "header.in_account": "in account {account}",
    "header.no_account": "no active account",
    "header.switch": "Switch account",
    "header.switch_button": "Switch",
    "header.sign_out": "Sign out",
    "header.sign_in": "Sign in",
    "header.sign_up": "Sign up",
    "skip": "Skip to content",
    "footer.powered": "Accounts and notifications by tenantd",
    "unread.badge": "{count} unread",
    # forms
    "field.email": "Email",
    "field.password": "Password",
    "field.new_password": "New password",
    "field.current_password": "Current password",
    "field.first_name": "First name",
    "field.last_name": "Last name",
    "field.account_name": "Account name",
    "field.role": "Role",
    "field.optional": "optional",
    "hint.password": "At least 8 characters. A passphrase is easiest to remember.",
    "role.owner": "Owner",
    "role.admin": "Admin",
    "role.member": "Member",
    "common.or": "or",
    "common.back": "Back",
    "common.cancel": "Cancel",
    # sign up / check inbox / verify
    "signup.title": "Create your account",
    "signup.lead": "Start free. You can invite your team later.",
    "signup.submit": "Sign up",
    "signup.have_account": "Already have an account?",
    "inbox.title": "Check your inbox",
    "inbox.lead": "We sent a link to {email}. Open it on this device to finish signing up.",
    "inbox.lead_generic": "We sent you a link. Open it on this device to finish signing up.",
    "inbox.resend_lead": "No email after a minute? Check your spam folder or send it again.",
    "inbox.resend": "Send the link again",
    "inbox.resent": "If that address is waiting for verification, a new link is on its way.",
    "verify.title": "Confirm your email address",
    "verify.lead": "One click and you are in.",
    "verify.submit": "Confirm email address",
    "verify.missing": "This page needs the link from your email. Request a new one below.",
    # login
    "login.title": "Sign in",
    "login.lead": "Welcome back.",
    "login.submit": "Sign in",
    "login.with": "Sign in with {provider}",
    "login.sso": "Continue with single sign-on",
    "login.forgot": "Forgot your password?",
    "login.no_account": "New here?",
    "login.create": "Create an account",
    "logout.done": "You are signed out.",
    "signed_out.title": "You are signed out",
    "signed_out.lead": "Your session ended. Sign in again to continue.",
    "impersonation.banner": "You are signed in as {email} by an operator",
    # reset password
    "reset.title": "Reset your password",
    "reset.lead": "Enter your email and we will send you a link to choose a new password.",
    "reset.submit": "Send reset link",
    "reset.sent": "If an account uses that address, a reset link is on its way.",
    "reset.confirm_title": "Choose a new password",
    "reset.confirm_lead": "Every other device will be signed out.",
    "reset.confirm_submit": "Set new password",
    "reset.done": "Your password is changed. Sign in with it now.",
    # invitations
    "invite.title": "You are invited",
    "invite.lead_signed_out": "Sign in or create an account with the invited address, then"
    " accept the invitation.",
    "invite.lead": "Join the account as {email}.",
    "invite.accept": "Accept invitation",
    "invite.missing": "This page needs the link from your invitation email.",
    "invite.accepted": "Welcome to {account}.",
    # account (profile)
    "account.title": "Your profile",
    "account.profile": "Profile",
    "account.verified": "Email verified",
    "account.password": "Password",
    "account.password_set_lead": "You sign in with a provider only. Set a password to also"
    " sign in with your email.",
    "account.password_submit": "Change password",
    "account.password_set_submit": "Set password",
    "account.password_done": "Password saved. Your other devices were signed out.",
    "account.providers": "Sign-in methods",
    "account.provider_password": "Email and password",
    "account.sessions": "Where you are signed in",
    "account.sessions_current": "This device",
    "account.sessions_end": "Sign out",
    "account.sessions_end_others": "Sign out every other device",
    "account.sign_out_all": "Sign out everywhere",
    "account.sign_out_all_lead": "Ends every session of yours, on every device, including"
    " this one.",
    # self-service (issue 28): names, my data, delete my user
    "account.names_submit": "Save name",
    "account.data": "Your data",
    "account.export_lead": "Download everything stored about you (profile, sign-in methods,"
    " memberships, sessions, notifications, preferences, your audit entries) as one JSON file.",
    "account.export": "Download my data",
    "account.delete": "Delete my user",
    "account.delete_lead": "Signs you out everywhere, leaves every account and deletes the"
    " accounts you own alone. Your data is erased for good after 30 days.",
    "account.delete_confirm": "Delete your user? You are signed out everywhere.",
    "account.delete_blocked": "You own an account that has other members. Transfer its"
    " ownership to one of them (or delete the account) first:",
    "done.names": "Name saved.",
    "done.user_deleted": "Your user is deleted. Everything stored about you is erased for"
    " good after 30 days.",
    "code.TRANSFER_OWNERSHIP_FIRST": "You own an account that has other members. Transfer its"
    " ownership or delete the account first.",
    # accounts
    "accounts.title": "Your accounts",
    "accounts.lead": "Switch between the teams you belong to, or start a new one.",
    "accounts.active": "Active",
    "accounts.switch": "Switch to this account",
    "accounts.manage": "Members",
    "accounts.create": "Create an account",
    "accounts.create_submit": "Create account",
    "accounts.created": "Account {account} created. You are now working in it.",
    "accounts.switched": "You are now working in {account}.",
    "accounts.none": "You do not belong to any account yet.",
    # members
    "members.title": "Members of {account}",
    "members.not_active": "This is not your active account. Switch to it to manage its members.",
    "members.list": "Members",
    "members.you": "you",
    "members.role_submit": "Change role",
    "members.remove": "Remove",
    "members.removed": "Member removed.",
    "members.role_changed": "Role changed.",
    "members.invite": "Invite someone",
    "members.invite_submit": "Send invitation",
    "members.invited": "Invitation sent to {email}.",
    "members.invitations": "Pending invitations",
    "members.no_invitations": "No pending invitations.",
    "members.invitation_expires": "expires {date}",
    "members.resend": "Resend",
    "members.resent": "Invitation sent again.",
    "members.revoke": "Revoke",
    "members.revoked": "Invitation revoked.",
    "members.transfer": "Transfer ownership",
    "members.transfer_lead": "The new owner can delete the account; you become an admin.",
    "members.transfer_to": "New owner",
    "members.transfer_submit": "Transfer ownership",
    "members.transferred": "Ownership transferred.",
    "members.leave": "Leave account",
    "members.leave_lead": "You lose access to this account's data. An admin can invite you again.",
    "members.leave_submit": "Leave account",
    "members.left": "You left the account.",
    "members.delete": "Delete account",
    "members.delete_lead": "The account is deleted now and purged for good after 30 days;"
    " until then support can restore it.",
    "members.delete_submit": "Delete account",
    "members.deleted": "The account is deleted. It is purged for good after 30 days.",
    "members.danger": "Danger zone",
    "members.invitations_off": "Invitations need a plan with team invitations.",
    "members.rename_submit": "Rename",
    "done.renamed": "Account renamed.",
    # join requests
    "join.title": "Join requests",
    "join.lead": "People whose email domain belongs to {account} asked to join.",
    "join.none": "No pending join requests.",
    "join.approve": "Approve",
    "join.deny": "Deny",
    "join.approved": "Request approved.",
    "join.denied": "Request denied.",
    "join.no_account": "Switch to an account you administer to see its join requests.",
    # notifications
    "notifications.title": "Notifications",
    "notifications.empty": "You are all caught up.",
    "notifications.mark_read": "Mark read",
    "notifications.mark_all_read": "Mark all read",
    "notifications.all_read": "Everything is marked read.",
    "notifications.live": "Live",
    "notifications.reconnecting": "Reconnecting…",
    "notifications.new": "New",
    "notifications.more": "Older notifications",
    "notifications.push": "Browser notifications",
    "notifications.push_lead": "Get notified on this device even when this page is closed.",
    "notifications.push_enable": "Turn on browser notifications",
    "notifications.push_on": "Browser notifications are on for this device.",
    "notifications.push_denied": "Your browser blocks notifications for this site.",
    "notifications.preferences": "Preferences",
    "preferences.title": "Notification preferences",
    "preferences.lead": "Choose how you hear about each kind of event.",
    "preferences.event": "Event",
    "preferences.none": "This application defines no notification types yet.",
    "preferences.save": "Save preferences",
    "preferences.saved": "Preferences saved.",
    "channel.in_app": "In app",
    "channel.email": "Email",
    "channel.sse": "Live",
    "channel.web_push": "Browser push",
    # unsubscribe
    "unsubscribe.title": "Unsubscribe",
    "unsubscribe.lead": "Stop emails about {event}?",
    "unsubscribe.submit": "Unsubscribe",
    "unsubscribe.done": "Done. You will get no more emails about {event}.",
    "unsubscribe.manage": "Manage all notification preferences",
    # after an action (the `done=` of the page a form redirects to)
    "done.welcome": "Your email address is confirmed. Welcome!",
    "done.signed_in": "You are signed in.",
    "done.signed_out": "You are signed out.",
    "done.password_reset": "Your password is changed. Sign in with it now.",
    "done.password": "Password saved. Your other devices were signed out.",
    "done.created": "Account created. You are now working in it.",
    "done.switched": "Switched account.",
    "done.joined": "Invitation accepted. Welcome to the team!",
    "done.invited": "Invitation sent.",
    "done.resent": "Invitation sent again.",
    "done.revoked": "Invitation revoked.",
    "done.role": "Role changed.",
    "done.removed": "Member removed.",
    "done.transferred": "Ownership transferred.",
    "done.left": "You left the account.",
    "done.deleted": "The account is deleted. It is purged for good after 30 days.",
    "done.approved": "Request approved.",
    "done.denied": "Request denied.",
    "done.all_read": "Everything is marked read.",
    "done.read": "Marked read.",
    "done.preferences": "Preferences saved.",
    # generic errors
    "error.title": "Something went wrong",
    "error.form_expired": "This form expired. Please try again.",
    "error.cross_site": "This request did not come from this site.",
    "error.not_found": "There is nothing here.",
    "error.not_found_title": "Page not found",
    "error.forbidden_title": "Not allowed",
    "error.reference": "If it happens again, tell us this reference: {id}",
    # API error codes in words
    "code.INVALID_CREDENTIALS": "That email and password do not match.",
    "code.EMAIL_NOT_VERIFIED": "Confirm your email address first: open the link we sent you.",
    "code.FORBIDDEN": "You are not allowed to do this.",
    "code.USER_DISABLED": "This user is disabled. Contact the service's operators.",
    "code.IMPERSONATION": "Not allowed while an operator is signed in as this user.",
    "code.FEATURE_NOT_ENABLED": "This account's plan does not include this feature.",
    "code.NOT_FOUND": "We could not find that.",
    "code.CONFLICT": "That conflicts with the current state.",
    "code.DOMAIN_CLAIMED": "Your email domain belongs to an existing account; we asked its"
    " owner to let you in.",
    "code.SEAT_LIMIT_REACHED": "The account has no free seat left.",
    "code.OWNER_CANNOT_LEAVE": "The owner cannot leave. Transfer ownership first.",
    "code.ROLE_EXISTS": "The account already has a role with this key.",
    "code.SYSTEM_ROLE": "The owner, admin and member roles cannot be changed.",
    "code.ROLE_IN_USE": "Members or pending invitations have this role. Give them another"
    " role first.",
    "code.INVITATION_REVOKED": "This invitation was revoked. Ask for a new one.",
    "code.INVITATION_EXPIRED": "This invitation expired. Ask for a new one.",
    "code.INVITATION_ALREADY_USED": "This invitation was already used.",
    "code.VALIDATION_ERROR": "Please check the highlighted fields.",
    "code.RATE_LIMITED": "Too many attempts. Wait a few minutes and try again.",
    "code.UNAUTHORIZED": "Please sign in again.",
    "code.INTERNAL": "Something went wrong on our side. Please try again.",
    # OpenID Connect refusals (the `error=` of /login)
    "oauth.oauth_state_invalid": "That sign-in took too long or was opened twice. Try again.",
    "oauth.oauth_denied": "The provider did not let you in (perhaps you cancelled).",
    "oauth.oauth_failed": "The provider's answer could not be verified. Try again.",
    "oauth.oauth_unavailable": "The provider cannot be reached right now.",
    "oauth.email_missing": "The provider did not share your email address.",
    "oauth.email_not_verified": "The provider has not verified your email address.",
    "oauth.user_disabled": "This user is disabled. Contact the service's operators.",
    "oauth.domain_claimed": "Your email domain belongs to an existing account; we asked its"
    " owner to let you in.",
    "oauth.identity_conflict": "Your account is already linked to another identity there.",
    "oauth.unknown": "Sign-in did not complete. Try again.",
    "oauth.sso_required": "Your organisation signs you in through its identity provider:"
    " use single sign-on.",
    "oauth.sso_response_invalid": "Your identity provider's answer could not be verified.",
    "oauth.sso_response_replayed": "That sign-in was already used. Start again.",
    "oauth.sso_unsolicited": "Start signing in here, not from your identity provider.",
    "oauth.sso_domain_mismatch": "Your identity provider vouched for an address this"
    " connection does not serve.",
    "oauth.sso_identity_conflict": "A user with this address exists outside your"
    " organisation's account. Ask its admin to invite you.",
    "oauth.seat_limit_reached": "Your organisation's account has no free seat. Ask its admin.",
    # two-factor sign-in, enrolment and step-up (issue 17), email change (issue 18)
    "mfa.title": "Two-step verification",
    "mfa.lead": "Your password is right. Now prove it is you with your second factor.",
    "mfa.totp_label": "Code from your authenticator app",
    "mfa.totp_hint": "Six digits; a new one every 30 seconds.",
    "mfa.totp_submit": "Verify",
    "mfa.passkey": "Use a passkey",
    "mfa.passkey_failed": "The passkey could not be used. Try again or enter a code.",
    "mfa.recovery_toggle": "Lost your device? Use a recovery code",
    "mfa.recovery_label": "Recovery code",
    "mfa.recovery_hint": "One of the ten codes you saved when you turned this on; each works once.",
    "mfa.recovery_submit": "Use recovery code",
    "mfa.wrong_code": "That code is not right. Check your app and try again.",
    "mfa.ticket_expired": "This sign-in took too long or was already used. Sign in again.",
    "mfa.back": "Start over",
    "mfa.block": "Two-factor authentication",
    "mfa.on": "On",
    "mfa.off": "Off",
    "mfa.block_lead": "Ask for a second proof when you sign in: a code from an authenticator"
    " app or a passkey.",
    "mfa.totp": "Authenticator app",
    "mfa.totp_on": "Codes from your authenticator app are asked for when you sign in.",
    "mfa.totp_setup": "Set up an authenticator app",
    "mfa.totp_scan": "Scan this QR code with your authenticator app (or type the key), then"
    " enter the six-digit code it shows.",
    "mfa.totp_secret": "Setup key",
    "mfa.totp_confirm": "Turn on",
    "mfa.totp_disable": "Remove authenticator app",
    "mfa.recovery": "Recovery codes",
    "mfa.recovery_left": "{count} of 10 recovery codes left.",
    "mfa.recovery_regenerate": "Make new recovery codes",
    "mfa.codes_title": "Save your recovery codes",
    "mfa.codes_lead": "Each code signs you in once if you lose your device. Keep them somewhere"
    " safe: they are shown only this once.",
    "mfa.passkeys": "Passkeys",
    "mfa.passkeys_none": "No passkey yet.",
    "mfa.passkey_add": "Add a passkey",
    "mfa.passkey_name": "Passkey name",
    "mfa.passkey_rename": "Rename",
    "mfa.passkey_delete": "Remove",
    "mfa.passkey_created": "Added {date}",
    "mfa.passkey_used": "last used {date}",
    "mfa.passkey_unsupported": "This browser cannot create passkeys.",
    "reauth.title": "Confirm it's you",
    "reauth.lead": "This is a sensitive change. Confirm it's you to go on.",
    "reauth.password_submit": "Confirm with password",
    "reauth.totp_submit": "Confirm with code",
    "reauth.none": "Sign out and sign in again to confirm it's you.",
    "email.block": "Email address",
    "email.current": "Your address is {email}.",
    "email.new": "New email address",
    "email.submit": "Send confirmation link",
    "email.confirm_title": "Confirm your new email address",
    "email.confirm_lead": "Your sign-in address becomes {email}.",
    "email.confirm_lead_unknown": "Confirm the change of your sign-in address.",
    "email.confirm_submit": "Confirm",
    "email.cancel_title": "Cancel the email change",
    "email.cancel_lead": "If you did not ask to change your email address, stop it here. Every"
    " session of the account is signed out and the address stays (or goes back to) this one.",
    "email.cancel_submit": "This wasn't me",
    "email.bad_link": "This link is invalid, expired or already used.",
    "email.cancelled": "The change is stopped and every session is signed out. Sign in and"
    " change your password.",
    "email.cancelled_restored": "The address of the account is this one again and every"
    " session is signed out. Sign in and change your password.",
    "email.cancelled_not_restored": "Every session is signed out, but the address could not go"
    " back to this one: another account uses it now. Contact support.",
    "undo.title": "This wasn't me",
    "undo.lead": "If you did not make the change this link was mailed about, undo it here."
    " Every session of the account is signed out.",
    "undo.submit": "Undo it and sign out everywhere",
    "undo.done": "The change is undone and every session is signed out. Sign in again and"
    " change your password (if the notice says the password was removed, use"
    ' "Forgot password").',
    "members.require_mfa": "Require two-factor authentication",
    "members.require_mfa_lead": "Members without a second factor must set one up before they"
    " can work in this account.",
    "members.require_mfa_on": "Turn on",
    "members.require_mfa_off": "Turn off",
    "accounts.restore": "Restore",
    "accounts.deleted": "Deleted accounts",
    "accounts.purge_after": "Deleted for good on {date} unless restored.",
    "done.mfa_signed_in": "You are signed in.",
    "done.totp_off": "The authenticator app is removed.",
    "done.reauthed": "Confirmed. You can go on now.",
    "done.passkey_renamed": "Passkey renamed.",
    "done.passkey_added": "Passkey added.",
    "done.passkey_removed": "Passkey removed.",
    "done.email_sent": "If the address can be used, a confirmation link is on its way to it.",
    "done.email_changed": "Your email address is changed.",
    "done.mfa_required": "Two-factor authentication is now required in this account.",
    "done.mfa_not_required": "Two-factor authentication is no longer required.",
    "done.restored": "The account is restored.",
    "code.REAUTH_REQUIRED": "Confirm it's you to make this change.",
    "code.MFA_REQUIRED": "This account requires two-factor authentication. Set it up on your"
    " profile first.",
    # built-in tenancy notifications (issue 16): event types in words
    "event.tenantd.invitation.received": "Invitations to you",
    "event.tenantd.member.joined": "New members of your accounts",
    "event.tenantd.join_request.received": "Requests to join your accounts",
    "event.tenantd.member.role_changed": "Changes to your role",
    # Passwordless passkey sign-in on /login and step-up through the provider (issue 17).
    "login.passkey": "Sign in with a passkey",
    "login.passkey_failed": "The passkey could not be used. Try again or use your password.",
    "reauth.provider_submit": "Confirm with {provider}",
    "reauth.passkey_submit": "Confirm with a passkey",
    "oauth.reauth_mismatch": "That is another account at the provider. Confirm with the one"
    " you signed in with.",
    "oauth.reauth_stale": "The provider did not ask you to sign in again. Try again.",
    "oauth.reauth_session": "Your session ended. Sign in again.",
    # notification settings: frequency, which setting applies, quiet hours, language,
    # account defaults (issue 18)
    "preferences.channels": "Channels",
    "preferences.account_defaults": "Account defaults",
    "preferences.account_note": "Some settings below come from the defaults of {account}."
    " Change one and it becomes your own choice.",
    "preferences.source_user": "Your choice",
    "preferences.source_account": "Account default",
    "preferences.digest_hint": "Batched into a digest {every} unless you choose otherwise.",
    "preferences.critical_hint": "Urgent: always delivered, whatever you choose here.",
    "preferences.frequency_label": "{event}: {channel}, how often",
    "preferences.legend": "“Your choice” marks a setting you changed; “Account default” one"
    " your account's owner or admins set for everyone. Unmarked settings are on.",
    "frequency.default": "Digest {every}",
    "frequency.instant": "Right away",
    "frequency.hourly": "Hourly digest",
    "frequency.daily": "Daily digest",
    "frequency.every_hour": "every hour",
    "frequency.every_day": "every day",
    "frequency.every_hours": "every {count} hours",
    "frequency.every_minutes": "every {count} minutes",
    "quiet.title": "Quiet hours and language",
    "quiet.lead": "During quiet hours, emails and browser notifications wait until the quiet"
    " hours end. Urgent notifications still come through; in-app notifications are never held.",
    "quiet.time_zone": "Time zone",
    "quiet.time_zone_none": "Not set",
    "quiet.start": "Quiet from",
    "quiet.end": "Quiet until",
    "quiet.language": "Language",
    "quiet.language_hint": "Emails are written in this language where a translation exists.",
    "quiet.summary": "Quiet every day from {start} to {end} ({zone}).",
    "quiet.save": "Save quiet hours and language",
    "language.en": "English",
    "language.fr": "Français",
    "defaults.title": "Account notification defaults",
    "defaults.lead": "What everyone in {account} gets unless they choose otherwise.",
    "defaults.back": "My preferences",
    "defaults.read_only": "Only the owner or an admin can change these defaults.",
    "defaults.managers_only": "Only the owner or an admin sets the account's defaults.",
    "defaults.label": "{event}: {channel}, default for everyone",
    "defaults.choice_none": "No default (on)",
    "defaults.choice_on": "On",
    "defaults.choice_off": "Off",
    "defaults.legend": "A member's own choice always wins over these defaults. They apply to"
    " notifications sent in this account.",
    "defaults.save": "Save defaults",
    "notifications.defaults_apply": "Some of what you receive follows the notification"
    " defaults of {account}.",
    "notifications.defaults_apply_link": "See which in your preferences",
    "done.quiet_hours": "Quiet hours and language saved.",
    "done.defaults": "Account defaults saved.",
    # sign-in by email and bot checks (issue 29)
    "login.email_code": "Email me a sign-in code",
    "emailcode.title": "Sign in with an email code",
    "emailcode.lead": "We will mail you a 6-digit code and a link. No password needed.",
    "emailcode.send": "Send me a code",
    "emailcode.sent": "If this address can sign in, a code and a link are on their way to"
    " {email}. They work once, for 10 minutes.",
    "emailcode.label": "6-digit code",
    "emailcode.hint": "From the email we just sent.",
    "emailcode.submit": "Sign in",
    "emailcode.again": "Send a new code",
    "emaillink.title": "Sign in",
    "emaillink.lead": "Continue to sign in on this browser.",
    "emaillink.submit": "Sign in",
    "code.CAPTCHA_FAILED": "Complete the bot check and try again.",
    "breach.warning": "This password appears in a known data breach. It works, but choose"
    " another one soon.",
    "done.password_reset_breached": "Your password is changed. It appears in a known data"
    " breach, though: choose another one once you are signed in.",
    "done.password_breached": "Password saved; your other devices were signed out. It"
    " appears in a known data breach, though: choose another one soon.",
    # the admin portal for the customer's IT (issue 30)
    "portal.open_title": "Set up your company's sign-in",
    "portal.open_lead": "This one-time link lets you configure single sign-on or directory sync"
    " for one account. Continue to start; the link cannot be opened again afterwards, and the"
    " page stays open for an hour.",
    "portal.open_submit": "Continue",
    "portal.invalid": "This portal link is not valid: it expired or was already opened."
    " Ask the account's owner for a new one.",
    "portal.session_ended": "Your portal session has ended. Ask the account's owner for a new"
    " link.",
    "portal.header": "Admin portal for {account}",
    "portal.expires": "This page works until {time} UTC.",
    "portal.sso_title": "Single sign-on",
    "portal.sso_lead": "Connect {account} to your identity provider (SAML 2.0 or OpenID"
    " Connect): your people then sign in through it.",
    "portal.sso_saved": "The connection is saved.",
    "portal.sp_title": "What your identity provider needs",
    "portal.sp_lead": "Paste these values into your identity provider's new application.",
    "portal.acs_url": "Single sign-on (ACS) URL",
    "portal.sp_entity_id": "Audience URI (SP entity ID)",
    "portal.metadata_url": "Service provider metadata URL",
    "portal.redirect_uri": "OpenID Connect redirect URI",
    "portal.steps_title": "Step by step",
    "portal.provider_okta": "Okta",
    "portal.provider_entra": "Microsoft Entra ID",
    "portal.provider_google": "Google Workspace",
    "portal.sso_steps_okta": "In the Okta Admin Console, open Applications, Create App"
    " Integration, SAML 2.0.\nSingle sign-on URL: the ACS URL above; Audience URI: the SP"
    " entity ID above; Name ID format: EmailAddress; Application username: Email.\nOptional:"
    " a group attribute statement named groups.\nFinish, open the Sign On tab, copy the"
    " Metadata URL's document (View SAML setup instructions: IdP metadata) and paste it"
    " below.\nAssign the application to your people or groups.",
    "portal.sso_steps_entra": "In the Microsoft Entra admin center, open Enterprise"
    " applications, New application, Create your own application (non-gallery).\nSingle"
    " sign-on, SAML: Identifier (Entity ID): the SP entity ID above; Reply URL: the ACS URL"
    " above.\nAttributes and claims: keep the email address as the user identifier; add a"
    " groups claim if groups should give roles.\nDownload the Federation Metadata XML and"
    " paste it below.\nUsers and groups: assign who may sign in.",
    "portal.sso_steps_google": "In the Google Admin console, open Apps, Web and mobile apps,"
    " Add app, Add custom SAML app.\nCopy the IdP details: SSO URL, Entity ID and"
    " certificate, for the fields below (or download the IdP metadata).\nService provider"
    " details: ACS URL and Entity ID from above; Name ID format EMAIL, Name ID Basic"
    " Information, Primary email.\nTurn the app on for your organisational units.",
    "portal.connections_title": "Your connection",
    "portal.create_title": "Connect your identity provider",
    "portal.update_title": "Update the identity provider",
    "portal.field_type": "Protocol",
    "portal.type_saml": "SAML 2.0",
    "portal.type_oidc": "OpenID Connect",
    "portal.field_domains": "Email domains",
    "portal.hint_domains": "Your people's email domains, separated by spaces or commas.",
    "portal.saml_legend": "SAML: the metadata document, or the three values under it",
    "portal.field_idpMetadataXml": "Identity provider metadata XML",
    "portal.field_idpEntityId": "Identity provider entity ID (issuer)",
    "portal.field_idpSsoUrl": "Identity provider sign-in URL",
    "portal.field_idpCertificate": "Identity provider signing certificate (PEM)",
    "portal.oidc_legend": "OpenID Connect",
    "portal.field_issuer": "Issuer URL",
    "portal.field_clientId": "Client ID",
    "portal.field_clientSecret": "Client secret",
    "portal.hint_keep": "Leave empty to keep what is saved.",
    "portal.save": "Save the connection",
    "portal.domains_now": "Domains: {domains}",
    "portal.directory_title": "Directory sync (SCIM)",
    "portal.directory_lead": "Provision and deprovision the people of {account} from your"
    " directory with SCIM 2.0.",
    "portal.directories_title": "Directories",
    "portal.scim_base_url": "SCIM base URL",
    "portal.token": "Bearer token",
    "portal.token_once": "Copy the token now: it is shown this once and never again.",
    "portal.directory_create": "Create a directory",
    "portal.directory_name": "Name (e.g. the identity provider)",
    "portal.directory_submit": "Create the directory",
    "portal.directory_none": "No directory yet.",
    "portal.directory_steps_okta": "In the Okta Admin Console, open your application (or"
    " create a SCIM 2.0 app), General, enable SCIM provisioning.\nProvisioning, Integration:"
    " SCIM connector base URL: the SCIM base URL; Unique identifier field: userName;"
    " Authentication mode: HTTP Header, the bearer token.\nTo App: enable Create Users,"
    " Update User Attributes and Deactivate Users.\nPush Groups for the groups that give"
    " roles.",
    "portal.directory_steps_entra": "In the Microsoft Entra admin center, open your"
    " enterprise application, Provisioning, Get started, Automatic.\nTenant URL: the SCIM"
    " base URL; Secret Token: the bearer token; Test Connection, Save.\nMappings: keep the"
    " defaults (userName from userPrincipalName or mail).\nStart provisioning.",
    "portal.directory_steps_google": "Google Workspace provisions by SCIM only to its"
    " catalogue of apps; for a custom app, sync with a tool that speaks SCIM 2.0 (or sign-in"
    " only, through single sign-on).\nGive that tool the SCIM base URL and the bearer token.",
}

CATALOGS: dict[str, dict[str, str]] = {"en": EN}


def text(key: str, language: str = "en", **values: Any) -> str:
    """One catalog entry, formatted; a missing key shows itself (easy to spot, never a 500)."""
    template = CATALOGS.get(language, EN).get(key) or EN.get(key) or key
    return template.format(**values) if values else template


def error_text(code: str, message: str, *, generic: bool, language: str = "en") -> str:
    """An API error in words: the catalog's sentence for its code when the service said
    nothing more specific than the code's default, else the service's own sentence."""
    key = f"code.{code}"
    if (generic or code == "VALIDATION_ERROR") and key in EN:
        return text(key, language)
    return message


def done_text(key: str | None, language: str = "en") -> str | None:
    """The confirmation of a `done=` key, or None for an unknown one (never echoes input)."""
    if not key or f"done.{key}" not in EN:
        return None
    return text(f"done.{key}", language)


def oauth_error_text(code: str, language: str = "en") -> str:
    key = f"oauth.{code}"
    return text(key if key in EN else "oauth.unknown", language)


def event_label(event_type: str, language: str = "en") -> str:
    """An event type in words when the catalog has it (the built-in ones), else its name."""
    key = f"event.{event_type}"
    return text(key, language) if key in EN else event_type
